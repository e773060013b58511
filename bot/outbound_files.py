"""The agent's files, delivered after its reply: uploads where the surface takes them, else one
line each saying where the file is.

What the agent hands over (`AgentFile`) is hostile: its name may carry directories or control
characters (names go through `bot.file_types.safe_name`), its `file://` link may point anywhere
(a symlink included), its bytes may be huge. So: bytes are uploaded only within
`capabilities.max_upload_bytes`; a `file://` link is read only when its real path is a regular
file inside the conversation's workspace and within the limit; an http(s) link is never fetched,
only named; bytes that cannot be uploaded are saved under the workspace's
`.switchboard/outbox/<date>/` so the note has a path. A failed upload is a line too: the turn
has already answered."""

from __future__ import annotations

import errno
import logging
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import anyio

from acp import AgentFile, open_in_workspace
from bot.attachments import save_dated
from bot.file_types import safe_name
from surfaces.base import ConversationKey, OutgoingFile, Surface
from surfaces.errors import SurfaceError
from surfaces.text import ellipsize

__all__ = ["FILES_PER_TURN", "OUTBOX", "deliver_files", "reply_as_file"]

log = logging.getLogger(__name__)

OUTBOX = Path(".switchboard") / "outbox"
FILES_PER_TURN = 10  # more than this in one reply are named in one line, not delivered


def _file_name(name: str, mime: str) -> str:
    """A safe name for the agent's file; "file" with the extension its type implies when the
    agent gave none that is usable."""
    return safe_name(name, fallback="file" + (mimetypes.guess_extension(mime or "") or ""))


@dataclass(frozen=True, slots=True)
class _Plan:
    """What happens to one agent file: `upload` it, or say `note`."""

    upload: OutgoingFile | None = None
    note: str = ""


async def deliver_files(
    surface: Surface, key: ConversationKey, files: list[AgentFile], workspace: Path
) -> list[str]:
    """Upload what can be uploaded, in order; return the note lines for the rest (and for
    uploads that failed)."""
    notes: list[str] = []
    for index, file in enumerate(files):
        if index >= FILES_PER_TURN:
            notes.append(f"{len(files) - FILES_PER_TURN} more files from the agent not shown.")
            break
        try:
            plan = await _plan(file, surface.capabilities.max_upload_bytes, workspace)
        except OSError as exc:  # the workspace is not writable, a file vanished: this file only
            log.warning("agent file %r for %s: %r", file.name, key, exc)
            plan = _Plan(note=f"File from the agent could not be kept: {_label(file)}.")
        if plan.upload is not None:
            try:
                await surface.send_file(key, plan.upload)
            except SurfaceError as exc:
                log.warning("upload of %r to %s failed: %s", plan.upload.name, key, exc)
                plan = _Plan(note=f"Could not upload {plan.upload.name}: {_reason(exc)}")
        if plan.note:
            notes.append(plan.note)
    return notes


def _label(file: AgentFile) -> str:
    return ellipsize(file.uri or file.name or "unnamed", 200)


def _reason(exc: SurfaceError) -> str:
    text = str(exc).strip().rstrip(".") or "the platform refused it"
    return ellipsize(text, 160) + "."


async def _plan(file: AgentFile, limit: int, workspace: Path) -> _Plan:
    mime = file.mime or "application/octet-stream"
    if file.data is not None:
        name = _file_name(file.name, file.mime)
        if len(file.data) <= limit:
            return _Plan(upload=OutgoingFile(name, file.data, mime))
        saved = await anyio.to_thread.run_sync(_save, workspace, name, file.data)
        why = "too big to upload here" if limit else "this chat takes no uploads"
        return _Plan(note=f"File from the agent ({why}): {saved}")
    parts = urlsplit(file.uri)
    if parts.scheme in ("http", "https"):
        return _Plan(note=f"Link from the agent: {ellipsize(file.uri, 300)}")
    if parts.scheme != "file":
        return _Plan(note=f"File from the agent: {_label(file)}")
    path = unquote(parts.path)
    if parts.netloc not in ("", "localhost"):
        return _Plan(note=f"File from the agent, not on this machine (not sent): {_label(file)}")
    if not path or "\x00" in path:
        return _Plan(note=f"File from the agent, with an unusable path (not sent): {_label(file)}")
    found = await anyio.to_thread.run_sync(_read_inside, workspace, path, limit)
    if isinstance(found, str):
        return _Plan(note=found)
    name = _file_name(file.name or Path(path).name, file.mime)
    guessed = file.mime or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return _Plan(upload=OutgoingFile(name, found, guessed))


def _read_inside(workspace: Path, path: str, limit: int) -> bytes | str:
    """The file's bytes, or the note to write instead. Opened beneath the workspace as the
    agent's `fs/*` requests are (acp `open_in_workspace`): a symlink or a directory the agent
    swaps in while we read never makes us send a file from outside."""
    shown = ellipsize(path, 300)
    try:
        fd = open_in_workspace(workspace, path)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return f"File from the agent, outside the workspace (not sent): {shown}"
        return f"File from the agent, not found: {shown}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"File from the agent, not a regular file (not sent): {shown}"
        if info.st_size > limit:
            why = "too big to upload here" if limit else "this chat takes no uploads"
            return f"File from the agent ({why}): {shown}"
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew since
        return f"File from the agent (too big to upload here): {shown}"
    return data


def _save(workspace: Path, name: str, data: bytes) -> str:
    """Save bytes under the outbox; the path relative to the workspace, never overwriting."""
    saved = save_dated(workspace, OUTBOX, name, data)
    return saved.relative_to(workspace.resolve()).as_posix()


def reply_as_file(text: str, summary_chars: int = 300) -> tuple[str, OutgoingFile]:
    """A long reply as `reply.md`, and the short message that goes with it: its first
    paragraph, shortened."""
    first = text.strip().split("\n\n", 1)[0]
    summary = ellipsize(first, summary_chars)
    message = f"{summary}\n\n(Full reply attached: reply.md)"
    return message, OutgoingFile("reply.md", text.encode("utf-8"), "text/markdown")
