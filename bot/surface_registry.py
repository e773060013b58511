"""Which chat surfaces exist and which are configured. The only place `bot/` imports surface
packages: every package under `surfaces/` that exports an `ENTRY` (a `SurfaceEntry`) is a chat
surface, listed in the order `Settings` declares their sections. An entry builds its adapter
only when the surface is configured, so a missing platform SDK breaks only that platform."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass

import surfaces
from config import Settings
from surfaces.base import Surface
from surfaces.plugin import SurfaceEntry


@functools.cache
def surface_entries() -> tuple[SurfaceEntry, ...]:
    found = []
    for package in pkgutil.iter_modules(surfaces.__path__, "surfaces."):
        if package.ispkg:
            entry = getattr(importlib.import_module(package.name), "ENTRY", None)
            if isinstance(entry, SurfaceEntry):
                found.append(entry)
    order = list(Settings.model_fields)
    return tuple(sorted(found, key=lambda entry: order.index(entry.name)))


def configured_entries(settings: Settings) -> list[SurfaceEntry]:
    return [entry for entry in surface_entries() if entry.is_configured(settings)]


def configured_surfaces(settings: Settings) -> list[Surface]:
    return [entry.build(settings) for entry in configured_entries(settings)]


def terminal_surface() -> Surface:
    """The terminal on this process's stdin and stdout (`switchboard chat`)."""
    from surfaces import console

    return console.create_surface()


def how_to_enable() -> list[str]:
    return [f"{entry.label}: {entry.enabled_by}" for entry in surface_entries()]


@dataclass(frozen=True, slots=True)
class NobodyAllowed:
    """A configured surface whose access lists name nobody: it would answer no one."""

    label: str
    setting: str  # the allowlist to fill in

    def warning(self) -> str:
        return (
            f"{self.label} is configured but {self.setting} is empty: nobody can use it. "
            "Set it to the platform user ids that may chat."
        )


def surfaces_nobody_can_use(settings: Settings) -> list[NobodyAllowed]:
    return [
        NobodyAllowed(entry.label, entry.setting("allowed_users"))
        for entry in configured_entries(settings)
        if entry.section(settings).nobody_allowed
    ]
