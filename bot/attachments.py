"""Files people attach, on their way to the agent: limits checked before download (the size the
platform claims) and during it (`fetch(limit)`), the type read from the bytes, then each file
becomes prompt content: an `image` / `audio` block when the agent takes those, else a file saved
in the workspace's inbox (`.switchboard/inbox/<date>/<name>`) sent as a `resource_link` (and,
for a small text file, embedded when the agent takes embedded context).

Every file that does not reach the agent gets one sentence saying why; nothing is dropped
silently."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from acp import (
    ContentBlock,
    PromptCapabilities,
    PromptContent,
    audio_block,
    embedded_text_block,
    image_block,
    open_workspace_dir,
    resource_link_block,
    text_block,
)
from bot.file_types import (
    BLOCK_AUDIO,
    BLOCK_IMAGES,
    TEXT,
    FileType,
    default_name,
    safe_name,
    sniff,
    with_extension,
)
from config import Settings
from surfaces.base import IncomingFile
from surfaces.errors import FileRefused, SurfaceError

log = logging.getLogger(__name__)

INBOX = Path(".switchboard") / "inbox"
EMBED_TEXT_BYTES = 64 * 1024  # a text file up to this size is also embedded in the prompt
_MAX_SUFFIX = 1000  # name-1 ... name-999: then the file is refused, never overwritten


@dataclass(frozen=True, slots=True)
class FileLimits:
    max_bytes: int
    max_files: int
    types: frozenset[str]

    @classmethod
    def of(cls, settings: Settings, platform_limit: int = 0) -> FileLimits:
        """Ours, lowered to what the platform lets a bot download (0: no limit of its own)."""
        max_bytes = settings.max_file_bytes
        if platform_limit > 0:
            max_bytes = min(max_bytes, platform_limit)
        return cls(max_bytes, settings.max_files, frozenset(settings.file_types))


@dataclass(frozen=True, slots=True)
class Received:
    name: str  # safe, with a fitting extension
    data: bytes = field(repr=False)
    kind: FileType


@dataclass(slots=True)
class Intake:
    """A turn's messages: their text, the files that passed, and a sentence per refused one."""

    text: str
    files: list[Received]
    refusals: list[str]
    attached: int  # files the messages carried, refused ones included
    prompt: PromptContent | None = None  # built once (saving is not repeated on a retry)

    @property
    def for_agent(self) -> bool:
        """Whether anything goes to the agent (a message of refused files only sends nothing)."""
        return bool(self.text.strip() or self.files or not self.attached)


def size_text(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"


def _label(incoming: IncomingFile) -> str:
    name = safe_name(incoming.name, fallback="")
    if name:
        return name
    return {"image": "The photo", "voice": "The voice note", "audio": "The audio file"}.get(
        incoming.kind, "A file"
    )


async def receive(
    files: Sequence[IncomingFile], limits: FileLimits, *, now: float | None = None
) -> tuple[list[Received], list[str]]:
    """Download what passes the limits; a sentence for each file that does not."""
    received: list[Received] = []
    refusals: list[str] = []
    for index, incoming in enumerate(files):
        label = _label(incoming)
        if index >= limits.max_files:
            refusals.append(
                f"{label} was not sent to the agent: a message may carry at most "
                f"{limits.max_files} files."
            )
            continue
        claimed = incoming.size
        if claimed is not None and claimed > limits.max_bytes:
            refusals.append(
                f"{label} was not sent to the agent: it is {size_text(claimed)}, over the "
                f"limit of {size_text(limits.max_bytes)} per file."
            )
            continue
        try:
            data = await incoming.fetch(limits.max_bytes)
        except FileRefused as exc:
            refusals.append(f"{label} was not sent to the agent: {_sentence_part(exc.reason)}.")
            continue
        except (SurfaceError, OSError) as exc:
            log.warning("could not download %r: %r", incoming.name, exc)
            refusals.append(f"{label} was not sent to the agent: it could not be downloaded.")
            continue
        if len(data) > limits.max_bytes:  # a fetch that did not stop at the limit
            refusals.append(
                f"{label} was not sent to the agent: it is over the limit of "
                f"{size_text(limits.max_bytes)} per file."
            )
            continue
        kind = sniff(data)
        if kind.category == "executable":
            refusals.append(
                f"{label} was not sent to the agent: it is a program, and Switchboard never "
                "accepts programs."
            )
            continue
        if kind.category not in limits.types:
            allowed = ", ".join(sorted(limits.types)) or "none"
            what = "file of an unknown kind" if kind.category == "binary" else f"{kind.category}"
            refusals.append(
                f"{label} was not sent to the agent: it is a {what}, and the kinds allowed "
                f"here are: {allowed}."
            )
            continue
        fallback = default_name(incoming.kind, now)
        name = with_extension(safe_name(incoming.name, fallback=fallback), kind)
        received.append(Received(name, data, kind))
    return received, refusals


def _sentence_part(reason: str) -> str:
    """A platform's reason inside our sentence (its own case: it may start with a name)."""
    return " ".join(reason.split()).rstrip(".") or "the platform refused it"


def neutral_text(files: Sequence[Received]) -> str:
    """The prompt's text for files sent without a caption, so the agent is asked something."""
    names = ", ".join(received.name for received in files)
    noun = "file" if len(files) == 1 else "files"
    return f"I am sending you {'this' if len(files) == 1 else 'these'} {noun}: {names}."


def save_in_inbox(workspace: Path, name: str, data: bytes, *, now: float | None = None) -> Path:
    """Write `data` into today's inbox folder (see `save_dated`)."""
    return save_dated(workspace, INBOX, name, data, now=now)


def save_dated(
    workspace: Path, under: Path, name: str, data: bytes, *, now: float | None = None
) -> Path:
    """Write `data` into today's folder of `under` (relative to the workspace) as `name` (a
    suffix when taken): atomically, and never over an existing file. The folder is opened
    beneath the workspace (acp `open_workspace_dir`) and everything after goes through its
    descriptor, so a symlink the agent swaps in never makes us write outside. Returns the
    file's path."""
    day = time.strftime("%Y-%m-%d", time.localtime(now))
    try:
        folder = open_workspace_dir(workspace, [*under.parts, day])
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        raise OSError(exc.errno, f"the folder {under / day} leads outside the workspace") from None
    temporary = f".incoming-{secrets.token_hex(8)}"
    try:
        _write_new(folder, temporary, data)
        try:
            stem, dot, extension = name.rpartition(".")
            if not stem:
                stem, dot, extension = name, "", ""
            for number in range(_MAX_SUFFIX):
                candidate = name if number == 0 else f"{stem}-{number}{dot}{extension}"
                try:
                    _place(folder, temporary, candidate, data)
                except FileExistsError:
                    continue
                return workspace.resolve() / under / day / candidate
            raise OSError(f"too many files named {name} in {under / day}")
        finally:
            os.unlink(temporary, dir_fd=folder)
    finally:
        os.close(folder)


def _write_new(folder: int, name: str, data: bytes) -> None:
    """Create `name` in `folder` (never an existing file, never through a symlink) with `data`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(name, flags, 0o600, dir_fd=folder)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(data)


def _place(folder: int, temporary: str, target: str, data: bytes) -> None:
    """Give the written file its name, failing on an existing one (never overwriting)."""
    try:
        # atomic: the name appears with the whole file behind it
        os.link(temporary, target, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: create exclusively and write again
        _write_new(folder, target, data)


def build_prompt(
    intake: Intake,
    capabilities: PromptCapabilities,
    workspace: Path,
    *,
    now: float | None = None,
) -> PromptContent:
    """The prompt for the agent: text alone as today, else a text block and one or two blocks
    per file. Saving is blocking I/O: run it off the event loop (`prompt_for`)."""
    if not intake.files:
        return intake.text
    blocks: list[ContentBlock] = [text_block(intake.text.strip() or neutral_text(intake.files))]
    for received in intake.files:
        mime = received.kind.mime
        if capabilities.image and mime in BLOCK_IMAGES:
            blocks.append(image_block(received.data, mime))
            continue
        if capabilities.audio and mime in BLOCK_AUDIO:
            blocks.append(audio_block(received.data, mime))
            continue
        path = save_in_inbox(workspace, received.name, received.data, now=now)
        uri = path.as_uri()
        blocks.append(resource_link_block(uri, path.name, mime, len(received.data)))
        if (
            capabilities.embedded_context
            and received.kind is TEXT
            and len(received.data) <= EMBED_TEXT_BYTES
        ):
            blocks.append(embedded_text_block(uri, received.data.decode("utf-8"), mime))
    return blocks


async def prompt_for(
    intake: Intake, capabilities: PromptCapabilities, workspace: Path
) -> PromptContent:
    """`build_prompt`, once per intake; a file that cannot be saved becomes a refusal."""
    if intake.prompt is None:
        if not intake.files:
            intake.prompt = intake.text
        else:
            intake.prompt = await anyio.to_thread.run_sync(
                build_prompt, intake, capabilities, workspace
            )
    return intake.prompt


async def take_in(
    texts: Sequence[str], files: Sequence[Sequence[IncomingFile]], limits: FileLimits
) -> Intake:
    """The messages of one turn (their texts, and each one's files: the count limit is per
    message)."""
    received: list[Received] = []
    refusals: list[str] = []
    attached = 0
    for message_files in files:
        attached += len(message_files)
        if message_files:
            passed, refused = await receive(message_files, limits)
            received += passed
            refusals += refused
    text = "\n\n".join(text for text in texts if text)
    return Intake(text, received, refusals, attached)
