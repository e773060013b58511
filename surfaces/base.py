"""The seam between the bot and a platform: neutral types only. An adapter is handed a callback and
speaks these types; it never imports `bot/` or `acp/`.

What a person did arrives as `Inbound` (a message) or `ChoiceAnswer` (a button press); what the bot
shows goes out through `Surface.send`/`edit`/`ask_choice`. `SurfaceCapabilities` tells the bot how
to split and render for this platform, and carries the surface's pacing (`surfaces.pacing`).

Every text a person or platform gives is made valid Unicode when these types are built
(`config.valid_text`), so no adapter can let a lone surrogate or a NUL reach the bot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio.abc

from config import valid_text
from surfaces.pacing import Pacing


def _make_valid(instance: object, *names: str) -> None:
    """Replace the named str fields of a frozen dataclass with their valid-Unicode form."""
    for name in names:
        value = getattr(instance, name)
        cleaned = valid_text(value)
        if cleaned is not value:
            object.__setattr__(instance, name, cleaned)


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a conversation lives: (surface, chat, thread). `thread` is "" outside threads."""

    surface: str
    chat: str
    thread: str = ""

    def __post_init__(self) -> None:
        _make_valid(self, "surface", "chat", "thread")

    def __str__(self) -> str:
        tail = f"/{self.thread}" if self.thread else ""
        return f"{self.surface}:{self.chat}{tail}"


@dataclass(frozen=True, slots=True)
class UserRef:
    id: str
    name: str = ""

    def __post_init__(self) -> None:
        _make_valid(self, "id", "name")

    @property
    def label(self) -> str:
        return self.name or self.id


# What kind of file a person attached, as the platform names it (the bot checks the bytes).
FILE_KINDS = ("image", "audio", "voice", "video", "document")


@dataclass(frozen=True, slots=True)
class IncomingFile:
    """A file a person attached to a message, not downloaded yet.

    `fetch(limit)` downloads it through the platform's own API with the bot's credentials (never
    from a URL a person supplied) and returns its bytes; past `limit` bytes it stops and raises
    `surfaces.errors.FileRefused`, as it does for a file the platform will not hand over. The bot
    checks the claimed `size` against its limits before it calls `fetch`, and the file's type
    from its bytes, not from `name` or `mime`."""

    name: str  # as the platform gave it ("" when it gave none, e.g. a photo); sanitised later
    mime: str  # as the platform claims it ("" when unknown)
    size: int | None  # in bytes, as the platform claims it (None when unknown)
    fetch: Callable[[int], Awaitable[bytes]] = field(compare=False, repr=False)
    kind: str = "document"  # one of FILE_KINDS
    # What another replica's adapter needs to download the same file (the platform's file id,
    # as a string the adapter alone reads; never a credential): handed back to that adapter's
    # `file_from_ref` when the message is relayed (bot/cluster.py). "": it cannot travel.
    ref: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        _make_valid(self, "name", "mime", "kind")


class RefetchingSurface(Protocol):
    """An adapter whose files can be downloaded by another replica (duck-typed: the bot checks
    for `file_from_ref`): the file `IncomingFile.ref` names, with a `fetch` of this adapter's,
    or None for a ref it does not recognise (checked like any input: it came through the shared
    store)."""

    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None: ...


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file the bot delivers (an image or file from the agent's reply, a long reply as .md)."""

    name: str  # a safe file name, no directories
    data: bytes = field(repr=False)
    mime: str = "application/octet-stream"
    caption: str = ""  # plain text, short

    @property
    def is_image(self) -> bool:
        return self.mime.startswith("image/")


@dataclass(frozen=True, slots=True)
class MenuCommand:
    """One command for a platform's own command menu (the agent's, named without the slash);
    `hint` describes its argument ("" when it takes none)."""

    name: str
    description: str = ""
    hint: str = ""


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message a person sent to the bot. In groups the adapter forwards only what is
    addressed to the bot (a mention, a reply, a command)."""

    key: ConversationKey
    user: UserRef
    text: str  # already stripped of the bot mention ("" for a file sent without a caption)
    event_id: str  # the platform's id of this event, for de-duplication of redeliveries
    # Set by the bot once the turn that carried this message has finished (or it was dropped):
    # `on_event` returns as soon as the message is accepted, so a surface that must wait for the
    # reply (a scripted terminal) waits on this.
    handled: anyio.Event | None = field(default=None, compare=False, repr=False)
    files: tuple[IncomingFile, ...] = ()  # what was attached, in the order the person sent it

    def __post_init__(self) -> None:
        _make_valid(self, "text", "event_id")


@dataclass(frozen=True, slots=True)
class ChoiceAnswer:
    """A person picked one option of a choice (a button press, a typed number)."""

    key: ConversationKey
    user: UserRef
    token: str
    event_id: str
    # Lets the bot answer only the person who pressed (an ephemeral notice), where supported.
    notify: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _make_valid(self, "token", "event_id")


@dataclass(frozen=True, slots=True)
class Choice:
    token: str  # one-time token the surface hands back in ChoiceAnswer
    label: str
    style: str = "default"  # "primary" | "danger" | "default"


@dataclass(frozen=True, slots=True)
class MessageRef:
    key: ConversationKey
    id: str


# A reply's live status line (e.g. which tool runs) is the last line and starts with this mark,
# so a surface that cannot rewrite what it showed (a terminal) can tell it from the answer.
STATUS_MARK = "⋯ "


def count_chars(text: str) -> int:
    return len(text)


def count_utf16(text: str) -> int:
    """Telegram counts message length in UTF-16 code units (of the valid text: never raises)."""
    return len(valid_text(text).encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class SurfaceCapabilities:
    max_chars: int  # per message, in the surface's own unit
    count: Callable[[str], int] = count_chars
    min_edit_interval: float = 1.0  # seconds between edits of one chat's messages
    can_edit: bool = True
    drafts: bool = False  # ephemeral live previews (`preview`); the final is sent as messages
    buttons: bool = True
    threads: bool = False
    # How people type the bot's commands here; the first is the one shown in help.
    command_prefixes: tuple[str, ...] = ("/",)
    # Whether `send`/`edit` can carry `buttons` (the live reply's Stop button); the bot passes
    # them only when this is true.
    message_buttons: bool = False
    # Largest file `send_file` takes, in bytes (0: no uploads here; the bot writes a one-line
    # note with the file's path instead), and largest image it sends as a picture.
    max_upload_bytes: int = 0
    max_photo_bytes: int = 0
    # Largest file the platform lets a bot download (0: no limit of its own below ours).
    max_download_bytes: int = 0
    # Whether `agent_command_menu` puts the agent's commands into the platform's own menu.
    agent_menus: bool = False
    # The surface's pacing, shared by the bot (turns) and the adapter (calls): see
    # `surfaces.pacing`. Made from `min_edit_interval` unless the adapter brings its own.
    pacing: Pacing = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.pacing is None:
            object.__setattr__(self, "pacing", Pacing(self.min_edit_interval))


# Returns once the event is accepted (queued, or answered), not when the reply is done: call it
# in order for one chat's events so the conversation sees them in order.
OnEvent = Callable[[Inbound | ChoiceAnswer], Coroutine[Any, Any, None]]


class Surface(Protocol):
    name: str
    capabilities: SurfaceCapabilities

    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Receive until cancelled (or, for finite inputs, until the input ends)."""
        ...

    def render(self, markdown: str) -> str:
        """Model Markdown -> this platform's dialect."""
        ...

    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        """Post a message. `formatted`: the text is `render()` output (else plain text).
        `buttons` (only passed when `capabilities.message_buttons`): pressing one hands its token
        back as a `ChoiceAnswer`, from anyone who can see it (the bot checks who pressed)."""
        ...

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        """Replace the message's text, and its buttons with `buttons` (none: they go)."""
        ...

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        """Upload a file (an image as a picture where it fits `max_photo_bytes`); only called
        with files within `capabilities.max_upload_bytes`."""
        ...

    async def preview(
        self, key: ConversationKey, text: str, *, buttons: Sequence[Choice] = ()
    ) -> None:
        """Show an ephemeral live preview (only called when `capabilities.drafts`), with the
        live reply's `buttons` where the preview is a message that can carry them (only passed
        when `capabilities.message_buttons`)."""
        ...

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef: ...

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        """Withdraw the buttons of the choice `ask_choice` showed as `ref` with `prompt`, and
        show what happened (the prompt is handed back, so no adapter keeps a copy)."""
        ...

    async def typing(self, key: ConversationKey) -> None: ...

    async def close(self) -> None:
        """The bot is done with the surface (after the last reply was delivered)."""
        ...

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        """Register (name, description) commands where the platform has a menu."""
        ...

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        """Show the agent's own commands in this conversation's native menu beside ours (only
        called when `capabilities.agent_menus`, and again whenever the list changes). Names are
        mapped to the platform's rules and a clash with ours renamed visibly; when a person uses
        an entry, the adapter hands the bot the text the agent expects: `/<name> <argument>`, or
        `//<name> <argument>` for a name that clashes with one of ours."""
        ...


class ClusterLeases(Protocol):
    """Cluster-wide named leases, for what exactly one replica may do at a time: the Telegram
    long poller, each Discord shard's gateway connection. The bot hands them to a surface that
    has a `set_leases(leases)` method (duck-typed), before `run`, and only when several replicas
    share a Redis store; a surface never handed them behaves as a single process does.

    A lease is held for `ttl` seconds from the last successful `hold`: hold it again at least
    every `ttl / 3` seconds, and stop the work it guards as soon as `hold` answers False. When the
    store cannot be reached, `hold` raises `LeasesUnavailable`; the work may go on until `ttl` has
    passed since the last successful hold (no other replica can take the lease before that)."""

    replica: str  # this replica's id, as `replicas()` lists it
    ttl: float

    async def hold(self, name: str) -> bool:
        """Take the lease `name`, or renew it if this replica holds it; False while another
        replica holds it."""
        ...

    async def let_go(self, name: str) -> None:
        """Release `name` if this replica holds it (at once, for a clean hand-over)."""
        ...

    async def replicas(self) -> list[str]:
        """The ids of the replicas alive now (this one included), sorted: every replica computes
        the same share of, say, Discord's shards from it."""
        ...
