"""A file on this machine as an `IncomingFile` (`switchboard ask --file`, the terminal's
`/file`): read only when the bot fetches it, never past the limit it asks for."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from surfaces.base import IncomingFile
from surfaces.errors import FileRefused


class LocalFileMissing(Exception):
    """A path given as a file that is not a readable regular file; one sentence."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"Cannot attach {path}: {problem}.")


def _read_bounded(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise FileRefused(f"it could not be read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise FileRefused(f"it is larger than {limit} bytes", limit=limit)
    return data


def local_file(path: str) -> IncomingFile:
    """The file at `path` (a regular file the process can read), raising `LocalFileMissing`."""
    local = Path(path).expanduser()
    try:
        info = local.stat()
    except OSError as exc:
        raise LocalFileMissing(path, (exc.strerror or "it cannot be read").lower()) from exc
    if not local.is_file():
        raise LocalFileMissing(path, "it is not a regular file")
    if not os.access(local, os.R_OK):
        raise LocalFileMissing(path, "it cannot be read")

    async def fetch(limit: int) -> bytes:
        return await anyio.to_thread.run_sync(_read_bounded, local, limit)

    return IncomingFile(name=local.name, mime="", size=info.st_size, fetch=fetch)
