"""The terminal surface."""

from __future__ import annotations

import sys

from surfaces.console.adapter import CONSOLE_KEY, LOCAL_USER, ConsoleSurface

__all__ = ["CONSOLE_KEY", "LOCAL_USER", "ConsoleSurface", "create_surface"]


def create_surface(*, interactive: bool | None = None) -> ConsoleSurface:
    """The terminal on this process's stdin/stdout."""
    fd = sys.stdin.fileno()
    if interactive is None:
        interactive = sys.stdin.isatty()
    return ConsoleSurface(input_fd=fd, output=sys.stdout, interactive=interactive)
