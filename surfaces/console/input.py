"""Reading the terminal: lines from stdin, whatever stdin is, and the terminal's own echo.

stdin may be a terminal, a pipe, a regular file or `/dev/null` (`docker run` without `-i`,
systemd, nohup). Pipes and terminals are polled, so a blocked read never keeps the process alive
at shutdown; epoll refuses regular files and `/dev/null` (EPERM), and those never block, so they
are read directly."""

from __future__ import annotations

import os
import stat
import termios
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel


async def read_lines(fd: int) -> AsyncIterator[str]:
    """The lines of `fd` (without their newline), the last one even without a newline."""
    direct = stat.S_ISREG(os.fstat(fd).st_mode)
    was_blocking = os.get_blocking(fd)
    if not direct:
        os.set_blocking(fd, False)
    buffer = b""
    try:
        while True:
            if direct:
                await anyio.lowlevel.checkpoint()
            else:
                try:
                    await anyio.wait_readable(fd)
                except PermissionError:  # cannot be polled: it never blocks either
                    direct = True
                    os.set_blocking(fd, True)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if buffer:
            yield buffer.decode("utf-8", "replace")
    finally:
        os.set_blocking(fd, was_blocking)


class TerminalEcho:
    """Turns the terminal's echo of typed characters off while a reply streams, so what a person
    types cannot land in the middle of the agent's text, and back on when input is wanted.
    Does nothing when the input is not a terminal."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        try:
            self._saved: list[Any] | None = termios.tcgetattr(fd)
        except (termios.error, OSError):
            self._saved = None
        self.hidden = False

    def hide(self) -> None:
        if self._saved is not None and not self.hidden:
            attrs = termios.tcgetattr(self._fd)
            attrs[3] &= ~termios.ECHO
            self._apply(attrs)
            self.hidden = True

    def show(self) -> None:
        if self._saved is not None and self.hidden:
            self._apply(self._saved)
            self.hidden = False

    def _apply(self, attrs: list[Any]) -> None:
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, attrs)
        except (termios.error, OSError):
            self._saved = None  # the terminal went away; nothing left to restore
