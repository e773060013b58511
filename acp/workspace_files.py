"""`fs/read_text_file` and `fs/write_text_file` for the agent, confined to its workspace.

A path an agent sends is hostile until opened: it must be absolute (ACP requires it) and lie
under the workspace, and it is then opened beneath the workspace's directory descriptor by
acp/beneath.py (openat2 `RESOLVE_BENEATH`, or the same rules walked one component at a time), so
neither `../`, nor a symlink leading out, nor one swapped in at any moment gets a read or a write
outside. A symlink inside the workspace whose relative target stays inside is followed for reads
and for the directories of a write; the file a write replaces must not be a symlink itself (the
rename would replace the link, not what it points to). Only regular files are read or replaced:
a FIFO would block the reader and a device has no end. A refusal is a `ClientRequestRefused`
whose message names only what the agent gave us, never where a symlink really led.

Reads stream in chunks (acp/line_reader.py): lines before `line` are counted, not kept, and at
most `MAX_READ_BYTES` are kept, so a 1 GB file of one line costs a chunk and the cap. A reply
past the cap is cut (at the last whole line when there is one) and ends with a line saying where
the file goes on.

The blocking file work runs in a worker thread: a slow disk must not stall the frame reader."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from acp.beneath import Resolution, open_beneath, open_dir_beneath
from acp.line_reader import Cut, take_lines
from config import valid_text

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002  # ACP's code for a missing resource
REFUSED = -32000  # a request we understood and will not carry out

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


def _absolute(method: str, raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise ClientRequestRefused(method, "path must be a non-empty string", code=INVALID_PARAMS)
    if "\x00" in raw:
        raise ClientRequestRefused(method, "path contains a NUL byte", code=INVALID_PARAMS)
    if not os.path.isabs(raw):
        raise ClientRequestRefused(
            method, f"path {shown(raw)!r} is not absolute", code=INVALID_PARAMS
        )
    return raw


def _outside(method: str, raw: str) -> ClientRequestRefused:
    return ClientRequestRefused(method, f"path {shown(raw)!r} is outside the workspace")


def confine(method: str, workspace: Path, raw: object) -> Path:
    """The real path of `raw` inside `workspace`, or ClientRequestRefused: for a terminal's
    working directory, which a new process enters by name anyway."""
    raw = _absolute(method, raw)
    root = Path(os.path.realpath(workspace))
    real = Path(os.path.realpath(raw))
    if real != root and not real.is_relative_to(root):
        raise _outside(method, raw)
    return real


def beneath_parts(method: str, workspace: Path, raw: object) -> list[str]:
    """The components of `raw` below the workspace (as configured, or its real path), for
    acp/beneath.py to resolve; `..` is kept for it to judge. Not under it: refused."""
    raw = _absolute(method, raw)
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    for root in (os.path.abspath(workspace), os.path.realpath(workspace)):
        prefix = [part for part in root.split("/") if part]
        if parts[: len(prefix)] == prefix:
            return parts[len(prefix) :]
    raise _outside(method, raw)


def _open_root(method: str, workspace: Path, raw: str) -> int:
    try:
        return os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ClientRequestRefused(
            method, f"the workspace for {shown(raw)!r} cannot be opened ({exc.strerror})"
        ) from None


def _path_param(method: str, params: dict[str, Any]) -> str:
    raw = params.get("path")
    if not isinstance(raw, str) or not raw:
        raise ClientRequestRefused(method, "path must be a non-empty string", code=INVALID_PARAMS)
    return raw


def _not_a_file(method: str, raw: str, mode: int) -> ClientRequestRefused:
    if stat.S_ISDIR(mode):
        what = "a directory"
    elif stat.S_ISLNK(mode):
        what = "a symbolic link; write to the file it points to"
    else:
        what = "not a regular file"
    return ClientRequestRefused(method, f"{shown(raw)!r} is {what}")


def _os_refusal(method: str, raw: str, exc: OSError) -> ClientRequestRefused:
    if exc.errno == errno.ENOENT:
        return ClientRequestRefused(
            method, f"{shown(raw)!r} does not exist", code=RESOURCE_NOT_FOUND
        )
    if exc.errno == errno.EXDEV:  # `..` above the workspace, or a symlink leading out
        return _outside(method, raw)
    if exc.errno in (errno.ELOOP, errno.EAGAIN):
        return ClientRequestRefused(
            method, f"{shown(raw)!r} has too many symbolic links or changed while it was opened"
        )
    if exc.errno == errno.EISDIR:
        return ClientRequestRefused(method, f"{shown(raw)!r} is a directory")
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


def open_in_workspace(workspace: Path, path: str) -> int:
    """A read-only descriptor for the absolute `path`, opened beneath the workspace by the same
    rules as `fs/*` (for the bot's own reads of files the agent names, e.g. the files it hands
    back after a reply); an `OSError` otherwise (`EXDEV`: outside the workspace)."""
    try:
        parts = beneath_parts("file", workspace, path)
    except ClientRequestRefused:
        raise OSError(errno.EXDEV, "outside the workspace") from None
    root = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_beneath(root, parts, os.O_RDONLY | os.O_NONBLOCK)
    finally:
        os.close(root)


def open_workspace_dir(workspace: Path, relative: Sequence[str]) -> int:
    """An `O_PATH` descriptor of the directory `relative` (components) beneath the workspace,
    each missing one made, resolved by the same rules as `fs/*`: for the bot's own writes into
    the workspace (attachments, the outbox), as `dir_fd` of its opens and links."""
    root = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_dir_beneath(root, list(relative), create=True)
    finally:
        os.close(root)


# ---- reading ---------------------------------------------------------------------------------
def _decoded(method: str, raw: str, data: bytes, cut: Cut | None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A cut inside a line may split a character: what comes before it is the text.
        if cut is not None and cut.within and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8")
        raise ClientRequestRefused(method, f"{shown(raw)!r} is not UTF-8 text") from None


def _read_lines(
    method: str, workspace: Path, raw: str, line: int | None, limit: int | None, how: Resolution
) -> str:
    parts = beneath_parts(method, workspace, raw)
    root = _open_root(method, workspace, raw)
    # O_NONBLOCK: opening a FIFO does not wait for a writer before it is refused.
    try:
        fd = open_beneath(root, parts, os.O_RDONLY | os.O_NONBLOCK, how=how)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    finally:
        os.close(root)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_a_file(method, raw, mode)
        data, cut = take_lines(fd, line or 1, limit)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    finally:
        os.close(fd)
    text = _decoded(method, raw, data, cut)
    return text if cut is None else text + cut.note()


async def read_text_file(
    workspace: Path, params: dict[str, Any], *, how: Resolution = Resolution.AUTO
) -> dict[str, Any]:
    method = "fs/read_text_file"
    raw = _path_param(method, params)
    line = _positive(method, params, "line")
    limit = _positive(method, params, "limit")
    content = await anyio.to_thread.run_sync(_read_lines, method, workspace, raw, line, limit, how)
    return {"content": content}


# ---- writing ---------------------------------------------------------------------------------
def _write_atomically(method: str, workspace: Path, raw: str, data: bytes, how: Resolution) -> None:
    parts = beneath_parts(method, workspace, raw)
    if not parts or parts[-1] == "..":
        raise ClientRequestRefused(method, f"{shown(raw)!r} is a directory")
    name = parts[-1]
    root = _open_root(method, workspace, raw)
    try:
        parent = open_dir_beneath(root, parts[:-1], create=True, how=how)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    finally:
        os.close(root)
    try:
        _replace_in(method, raw, parent, name, data)
    finally:
        os.close(parent)


def _replace_in(method: str, raw: str, parent: int, name: str, data: bytes) -> None:
    """`name` in the directory `parent` replaced by `data`: a temporary file beside it, then
    one rename, both by the directory's descriptor (never by a path that could be swapped)."""
    try:
        existing: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise _not_a_file(method, raw, existing.st_mode)
    temp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temp, flags, 0o600, dir_fd=parent)
    except OSError as exc:
        raise _os_refusal(method, raw, exc) from None
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), stat.S_IMODE(existing.st_mode) if existing else 0o644)
            os.fsync(file.fileno())
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise _os_refusal(method, raw, exc) from None


async def write_text_file(
    workspace: Path, params: dict[str, Any], *, how: Resolution = Resolution.AUTO
) -> None:
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
    await anyio.to_thread.run_sync(_write_atomically, method, workspace, raw, data, how)
