"""`fs/read_text_file` and `fs/write_text_file` for the agent, confined to its workspace.

A path an agent sends is hostile until checked: it must be absolute (ACP requires it) and its real
path (every symlink resolved) must lie inside the workspace's real path, so `../` and a symlink
pointing out are both refused. Only regular files are read or replaced: a FIFO would block the
reader and a device has no end. A refusal is a `ClientRequestRefused` whose message names only
what the agent gave us, never where a symlink really led.

The blocking file work runs in a worker thread: a slow disk must not stall the frame reader."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import anyio.to_thread

from config import valid_text

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002  # ACP's code for a missing resource
REFUSED = -32000  # a request we understood and will not carry out

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_WRITE_BYTES = 16 * 1024 * 1024
_MAX_SHOWN_PATH = 300


class ClientRequestRefused(Exception):
    """An agent->client request we answer with a JSON-RPC error instead of a result."""

    def __init__(self, method: str, reason: str, *, code: int = REFUSED) -> None:
        self.method = method
        self.reason = reason
        self.code = code
        super().__init__(f"{method} refused: {reason}")

    def rpc_error(self) -> dict[str, Any]:
        return {"code": self.code, "message": f"{self.method} refused: {self.reason}"}


def shown(path: str) -> str:
    """The agent's own path, shortened for a message."""
    return path if len(path) <= _MAX_SHOWN_PATH else path[:_MAX_SHOWN_PATH] + "…"


def confine(method: str, workspace: Path, raw: object) -> Path:
    """The real path of `raw` inside `workspace`, or ClientRequestRefused."""
    if not isinstance(raw, str) or not raw:
        raise ClientRequestRefused(method, "path must be a non-empty string", code=INVALID_PARAMS)
    if "\x00" in raw:
        raise ClientRequestRefused(method, "path contains a NUL byte", code=INVALID_PARAMS)
    if not os.path.isabs(raw):
        raise ClientRequestRefused(
            method, f"path {shown(raw)!r} is not absolute", code=INVALID_PARAMS
        )
    root = Path(os.path.realpath(workspace))
    real = Path(os.path.realpath(raw))
    if real != root and not real.is_relative_to(root):
        raise ClientRequestRefused(method, f"path {shown(raw)!r} is outside the workspace")
    return real


def _path_param(method: str, params: dict[str, Any]) -> str:
    raw = params.get("path")
    if not isinstance(raw, str) or not raw:
        raise ClientRequestRefused(method, "path must be a non-empty string", code=INVALID_PARAMS)
    return raw


def _not_a_file(method: str, raw: str, mode: int) -> ClientRequestRefused:
    what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    return ClientRequestRefused(method, f"{shown(raw)!r} is {what}")


def _os_refusal(method: str, raw: str, exc: OSError) -> ClientRequestRefused:
    if exc.errno == errno.ENOENT:
        return ClientRequestRefused(
            method, f"{shown(raw)!r} does not exist", code=RESOURCE_NOT_FOUND
        )
    if exc.errno == errno.ELOOP:  # swapped for a symlink after it was resolved
        return ClientRequestRefused(method, f"{shown(raw)!r} changed while it was opened")
    return ClientRequestRefused(method, f"{shown(raw)!r} could not be used ({exc.strerror})")


def _positive(method: str, params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ClientRequestRefused(
            method, f"{name} must be a positive integer", code=INVALID_PARAMS
        )
    return value


def _read_lines(method: str, workspace: Path, raw: str, line: int | None, limit: int | None) -> str:
    real = confine(method, workspace, raw)
    # O_NOFOLLOW: the last component cannot have become a symlink since it was resolved;
    # O_NONBLOCK: opening a FIFO does not wait for a writer before it is refused.
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_file(method, raw, mode)
    try:
        kept = _lines(method, raw, os.fdopen(fd, "rb"), line, limit)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    try:
        return b"".join(kept).decode("utf-8")
    except UnicodeDecodeError:
        raise ClientRequestRefused(method, f"{shown(raw)!r} is not UTF-8 text") from None


def _lines(
    method: str, raw: str, file: BinaryIO, line: int | None, limit: int | None
) -> list[bytes]:
    with file:
        kept: list[bytes] = []
        size = 0
        first = line or 1
        for number, text in enumerate(file, start=1):
            if number < first:
                continue
            if limit is not None and len(kept) >= limit:
                break
            kept.append(text)
            size += len(text)
            if size > MAX_READ_BYTES:
                raise ClientRequestRefused(
                    method,
                    f"{shown(raw)!r} is larger than {MAX_READ_BYTES // (1024 * 1024)} MiB; "
                    "read it in parts with line and limit",
                )
    return kept


async def read_text_file(workspace: Path, params: dict[str, Any]) -> dict[str, Any]:
    method = "fs/read_text_file"
    raw = _path_param(method, params)
    line = _positive(method, params, "line")
    limit = _positive(method, params, "limit")
    content = await anyio.to_thread.run_sync(_read_lines, method, workspace, raw, line, limit)
    return {"content": content}


def _write_atomically(method: str, workspace: Path, raw: str, data: bytes) -> None:
    real = confine(method, workspace, raw)
    root = Path(os.path.realpath(workspace))
    if real == root:
        raise ClientRequestRefused(method, f"{shown(raw)!r} is a directory")
    try:
        existing = os.lstat(real)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise _not_a_file(method, raw, existing.st_mode)
    parent = real.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    # A directory created just now could have been replaced by a symlink leading out.
    if not Path(os.path.realpath(parent)).is_relative_to(root):
        raise ClientRequestRefused(method, f"path {shown(raw)!r} is outside the workspace")
    try:
        fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{real.name}.", suffix=".tmp")
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temp, stat.S_IMODE(existing.st_mode) if existing is not None else 0o644)
        os.replace(temp, real)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise _os_refusal(method, raw, exc) from None


async def write_text_file(workspace: Path, params: dict[str, Any]) -> None:
    method = "fs/write_text_file"
    raw = _path_param(method, params)
    content = params.get("content")
    if not isinstance(content, str):
        raise ClientRequestRefused(method, "content must be a string", code=INVALID_PARAMS)
    data = valid_text(content).encode()  # a lone surrogate cannot be written as UTF-8
    if len(data) > MAX_WRITE_BYTES:
        raise ClientRequestRefused(
            method, f"content is larger than {MAX_WRITE_BYTES // (1024 * 1024)} MiB"
        )
    await anyio.to_thread.run_sync(_write_atomically, method, workspace, raw, data)
