"""The seam between the bot and a platform: neutral types only. An adapter is handed a callback and
speaks these types; it never imports `bot/` or `acp/`.

What a person did arrives as `Inbound` (a message) or `ChoiceAnswer` (a button press); what the bot
shows goes out through `Surface.send`/`edit`/`ask_choice`, and a reply being written through the
`LiveReply` that `Surface.open_live` gives. `SurfaceCapabilities` tells the bot how to split and
render for this platform, and carries the surface's pacing (`surfaces.pacing`).

Every text a person or platform gives is made valid Unicode when these types are built
(`config.valid_text`), so no adapter can let a lone surrogate or a NUL reach the bot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
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
    # A link button: it opens this url, and its token is never handed back. Only http(s) urls
    # are rendered; an adapter drops any other (`surfaces.links.renderable`).
    url: str = ""


@dataclass(frozen=True, slots=True)
class MessageRef:
    key: ConversationKey
    id: str


# A reply's live status line (e.g. which tool runs) is the last line and starts with this mark,
# so a surface that cannot rewrite what it showed (a terminal) can tell it from the answer.
STATUS_MARK = "⋯ "

# What a live message the final text no longer needs is edited to: platforms refuse empty text and
# offer us no delete, and stale text repeated below the answer would confuse more than a dot.
BLANK = "…"


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
    # How people type the bot's commands here; the first is the one shown in help.
    command_prefixes: tuple[str, ...] = ("/",)
    # Whether `send`/`edit` can carry `buttons` (the live reply's Stop button); the bot passes
    # them only when this is true.
    message_buttons: bool = False
    # Largest file `send_file` takes, in bytes (0: no uploads here; the bot writes a one-line
    # note with the file's path instead).
    max_upload_bytes: int = 0
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


@dataclass(frozen=True, slots=True)
class LivePart:
    """One message of a reply being written. Plain text as the agent has written it so far
    (unrendered: half-written Markdown renders badly), or, with `final`, a part the text has grown
    past for good, already `render()`ed: it will never change again, so it is shown once, in its
    final form, and `finish` finds it done."""

    text: str
    final: bool = False


class LiveReply(Protocol):
    """One reply (one turn) shown while the agent writes it, then finished. Made by
    `Surface.open_live`, one per reply; the bot calls one method at a time.

    It keeps what each of its messages shows (the one place that does), so it skips a call that
    would change nothing, and changes a message's buttons only when they change. It paces itself:
    every platform call it makes passes the chat's `ChatPacer` (`surfaces.pacing`) once, which
    also records a 429 for the whole chat. Each call is shielded from cancellation, bounded by
    `surfaces.live.CALL_TIMEOUT`, so that what it believes a message shows stays true when the
    reply is cancelled. It raises the surface's own errors (`surfaces.errors`); the bot decides
    what to do about them (the kit's `surfaces.live.EditedLive` is the default built on `send` and
    `edit`)."""

    async def ready(self) -> None:
        """Return once a `show` would make its call at once (the chat's pacer has a turn free,
        with any window for optional calls: a Telegram group's minute). Takes nothing; the bot
        awaits it before it works out what to show, so that what is shown is the newest text,
        not the text of when the wait began. May return at once (then `show` waits instead)."""
        ...

    async def show(
        self,
        parts: Sequence[LivePart],
        status: str | None = None,
        buttons: Sequence[Choice] = (),
    ) -> bool:
        """Show the reply as it stands: `parts` in order, one message each, the `final` ones in
        final (rendered) form; `status` (one paragraph, bounded by the bot; None: none) under the
        last part, marked with STATUS_MARK where it is text, on a message of its own where it does
        not fit; `buttons` (the Stop button) on the last message, where messages can carry them.
        Only what differs from what shows is sent. Where not everything can be shown live (a
        draft bubble shows the last part only) it shows what it can. Returns whether the chat now
        shows the reply (False where nothing is shown live: no edits), so the bot knows when to
        stop its typing indicator. Raises the platform call's SurfaceError (a RateLimited is
        already recorded by the pacer; after MessageGone the message is forgotten and sent anew
        by the next `show`)."""
        ...

    async def finish(self, parts: Sequence[str], *, skip: Collection[int] = ()) -> None:
        """End the reply with `parts` (each `render()` output, one message each): when it
        returns, message i shows parts[i] for every i not in `skip` (indexes the bot gave up on:
        left as they are), in order and without buttons; a live message past the last part shows
        BLANK; nothing is live any more (a draft dropped, a native stream stopped). A part a
        message already shows in final form is not sent again, so `finish` can be called again
        after a failure and does only what is left. The first failing call raises `PartFailed`
        (its `index`: the message, which may be past the last part for a blank; `error`: the
        SurfaceError)."""
        ...


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
        """Upload a file (an image as a picture where the platform takes it as one); only called
        with files within `capabilities.max_upload_bytes`."""
        ...

    def open_live(self, key: ConversationKey) -> LiveReply:
        """A new live reply in the conversation (`surfaces.live.EditedLive(self, key)` where
        `send` and `edit` are all it needs)."""
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
    takes leases (`surfaces.abilities.TakesLeases`, found once at start-up), before `run`, and
    only when several replicas share a Redis store; a surface never handed them behaves as a
    single process does. `surfaces.lease_follow.LeaseFollower` holds them by these rules.

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
