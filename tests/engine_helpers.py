"""Helpers for in-process tests of bot/: the one recording surface (it records what the bot
shows, fails on request and injects what people do), a running `BotApp`, fast settings and
bounded waits. Engine tests and the reply-stream tests use the same surface."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from bot.access import AccessPolicy
from bot.app import BotApp
from bot.store import open_store
from config import Settings, load_settings
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    LiveReply,
    MenuCommand,
    MessageRef,
    OnEvent,
    OutgoingFile,
    SurfaceCapabilities,
    UserRef,
    count_chars,
)
from surfaces.errors import SurfaceError
from surfaces.live import EditedLive
from tests.conftest import FakeAgent
from tests.store_backends import CLUSTER_KEY

_Posted = tuple[Inbound | ChoiceAnswer, anyio.Event]

SURFACE = "telegram"  # a surface with an allowlist in Settings, so access rules apply
CHAT = ConversationKey(SURFACE, "chat-1")


@dataclass
class Call:
    # send | edit | typing | ask_choice | close_choice | notify | send_file | agent_menu
    op: str
    text: str
    message: str = ""  # id of the message sent or edited
    key: ConversationKey | None = None
    choices: tuple[Choice, ...] = ()
    allowed_users: tuple[str, ...] = ()
    user: str = ""  # notify: who was told
    formatted: bool = False  # send/edit: the text is render() output
    at: float = field(default_factory=time.monotonic)
    error: SurfaceError | None = None
    buttons: tuple[Choice, ...] = ()  # send/edit: the message's buttons
    file: OutgoingFile | None = None  # send_file
    menu: tuple[MenuCommand, ...] = ()  # agent_menu: the agent's commands shown


class ScriptedSurface:
    """A Surface for tests: records every call, fails on request, and injects events through
    the callback the bot hands to `run()`, one at a time and in order, as a platform adapter
    would. Messages made by `message()` carry `Inbound.handled`, so a test can wait for a turn.
    `render_with` stands in for the platform's Markdown rendering (the identity by default)."""

    def __init__(
        self,
        name: str = SURFACE,
        *,
        max_chars: int = 4096,
        count: Callable[[str], int] = count_chars,
        min_edit_interval: float = 0.01,
        can_edit: bool = True,
        render_with: Callable[[str], str] = lambda markdown: markdown,
        message_buttons: bool = False,
        max_upload_bytes: int = 0,
        agent_menus: bool = False,
    ) -> None:
        self.name = name
        self.capabilities = SurfaceCapabilities(
            max_chars=max_chars,
            count=count,
            min_edit_interval=min_edit_interval,
            can_edit=can_edit,
            message_buttons=message_buttons,
            max_upload_bytes=max_upload_bytes,
            agent_menus=agent_menus,
        )
        self.render_with = render_with
        self.calls: list[Call] = []
        self.commands: list[tuple[str, str]] = []
        self._always_fail: dict[str, SurfaceError] = {}
        self._next_failures: list[tuple[frozenset[str], SurfaceError]] = []
        self._crashes: dict[tuple[ConversationKey, str], Exception] = {}
        self._ids = itertools.count(1)
        self._events = itertools.count(1)
        self._inbox: MemoryObjectSendStream[_Posted] | None = None
        self.choice_posted = anyio.Event()

    # ---- failure injection ------------------------------------------------------------------
    def fail_always(self, op: str, error: SurfaceError) -> None:
        """Every later `op` call ("send", "edit", ...) raises `error`."""
        self._always_fail[op] = error

    def fail_next(self, error: SurfaceError, times: int = 1, on: str = "send edit") -> None:
        """The next `times` calls of the ops in `on` raise `error`, one after the other; a call of
        another op in between goes through."""
        self._next_failures.extend([(frozenset(on.split()), error)] * times)

    def crash(self, key: ConversationKey, op: str, error: Exception | None) -> None:
        """Every later `op` call for `key` raises `error` (None: stop), as a bug in an adapter
        would: not a SurfaceError, so nothing in the bot expects it."""
        if error is None:
            self._crashes.pop((key, op), None)
        else:
            self._crashes[key, op] = error

    async def _record(self, call: Call) -> None:
        await anyio.lowlevel.checkpoint()  # like real I/O: a point where other tasks run
        assert call.key is not None
        crash = self._crashes.get((call.key, call.op))
        if crash is not None:
            raise crash
        self.calls.append(call)
        if self._next_failures and call.op in self._next_failures[0][0]:
            call.error = self._next_failures.pop(0)[1]
            raise call.error
        error = self._always_fail.get(call.op)
        if error is not None:
            call.error = error
            raise error

    # ---- Surface protocol ---------------------------------------------------------------------
    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hand posted events to the bot one at a time, in order, as a platform adapter does."""
        inbox, outbox = anyio.create_memory_object_stream[_Posted](math.inf)
        self._inbox = inbox
        try:
            with outbox:
                task_status.started()
                async for event, accepted in outbox:
                    try:
                        await on_event(event)
                    finally:
                        accepted.set()
        finally:
            self._inbox = None
            inbox.close()

    def render(self, markdown: str) -> str:
        return self.render_with(markdown)

    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        assert not buttons or self.capabilities.message_buttons, "buttons on a surface without"
        ref = MessageRef(key, str(next(self._ids)))
        call = Call("send", text, ref.id, key, formatted=formatted, buttons=tuple(buttons))
        await self._record(call)
        return ref

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        assert not buttons or self.capabilities.message_buttons, "buttons on a surface without"
        call = Call("edit", text, ref.id, ref.key, formatted=formatted, buttons=tuple(buttons))
        await self._record(call)

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        limit = self.capabilities.max_upload_bytes
        assert len(file.data) <= limit, f"{file.name}: {len(file.data)} bytes past {limit}"
        ref = MessageRef(key, str(next(self._ids)))
        await self._record(Call("send_file", file.name, ref.id, key, file=file))
        return ref

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        assert self.capabilities.agent_menus, "agent menus on a surface without"
        await self._record(Call("agent_menu", "", "", key, menu=tuple(commands)))

    def open_live(self, key: ConversationKey) -> LiveReply:
        return EditedLive(self, key)

    async def typing(self, key: ConversationKey) -> None:
        await self._record(Call("typing", "", "", key))

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        ref = MessageRef(key, str(next(self._ids)))
        call = Call("ask_choice", prompt, ref.id, key, tuple(choices), tuple(allowed_users))
        await self._record(call)
        self.choice_posted.set()
        return ref

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        await self._record(Call("close_choice", outcome, ref.id, ref.key))

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        self.commands = list(commands)

    async def close(self) -> None:
        return None

    # ---- what people do -----------------------------------------------------------------------
    def post(self, event: Inbound | ChoiceAnswer) -> anyio.Event:
        """Hand `event` to the bot. Returns an event that is set when the bot is done with it: for
        a message (made by `message()`), when its turn finished or it was refused or dropped; for
        a button press, when the bot's callback returned."""
        assert self._inbox is not None, "the surface is not running"
        accepted = anyio.Event()
        self._inbox.send_nowait((event, accepted))
        if isinstance(event, Inbound) and event.handled is not None:
            return event.handled
        return accepted

    def message(
        self, user: str, text: str, *, event_id: str = "", key: ConversationKey = CHAT
    ) -> Inbound:
        return Inbound(
            key,
            UserRef(user, user.title()),
            text,
            event_id or self._event_id(),
            handled=anyio.Event(),
        )

    def press(
        self, user: str, token: str, *, event_id: str = "", key: ConversationKey = CHAT
    ) -> ChoiceAnswer:
        async def notify(text: str) -> None:
            self.calls.append(Call("notify", text, "", key, user=user))

        return ChoiceAnswer(
            key, UserRef(user, user.title()), token, event_id or self._event_id(), notify
        )

    def _event_id(self) -> str:
        return f"ev-{next(self._events)}"

    # ---- what the chat shows ------------------------------------------------------------------
    def ops(self, *names: str) -> list[Call]:
        return [c for c in self.calls if c.op in names and c.error is None]

    def buttons_shown(self) -> dict[str, tuple[Choice, ...]]:
        """Message id -> the buttons it carries now."""
        buttons: dict[str, tuple[Choice, ...]] = {}
        for call in self.ops("send", "edit"):
            buttons[call.message] = call.buttons
        return buttons

    def files(self) -> list[OutgoingFile]:
        return [call.file for call in self.ops("send_file") if call.file is not None]

    def shown(self) -> dict[str, str]:
        """Message id -> the text it shows now, in the order the messages were sent."""
        messages: dict[str, str] = {}
        for call in self.ops("send", "edit"):
            messages[call.message] = call.text
        return messages

    def transcript(self) -> str:
        return "\n".join(self.shown().values())

    def choices(self) -> list[Call]:
        return self.ops("ask_choice")

    def notices(self, user: str | None = None) -> list[str]:
        return [c.text for c in self.ops("notify") if user is None or c.user == user]


def engine_settings(
    tmp_path: Path, fake_agent: FakeAgent, *options: str, **overrides: Any
) -> Settings:
    """Fast settings for a BotApp on the fake agent: alice and bob may chat, carol approves."""
    values: dict[str, Any] = {
        "agent": "kiro",
        "agent_command": fake_agent.command(*options),
        "workspace": tmp_path,
        "state": str(tmp_path / "state.db"),
        "cancel_grace": 1,
        "shutdown_grace": 0.5,
        "request_timeout": 10,
        "initialize_timeout": 10,
        "retry": {"base_delay": 0.01},
        "telegram": {"allowed_users": ["alice", "bob"], "approvers": ["carol"]},
    }
    values.update(overrides)
    if str(values["state"]).startswith("redis://"):  # replicas on Redis sign their relays
        values.setdefault("cluster_key", CLUSTER_KEY)
    return load_settings(**values)


@asynccontextmanager
async def running_app(settings: Settings, *surfaces: ScriptedSurface) -> AsyncIterator[BotApp]:
    """A serving BotApp with its own store; stopped (turns cancelled, agents shut down) on exit."""
    store = open_store(settings.state)
    app = BotApp(settings, store, AccessPolicy.from_settings(settings))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await app.serve(surfaces, stop, task_status=task_status)

            await tg.start(serve)
            try:
                yield app
            finally:
                stop.set()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


async def wait_for(predicate: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Poll until `predicate()` is true; fail with `what` after `timeout` seconds."""
    with anyio.move_on_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


async def finished(*events: anyio.Event, timeout: float = 15.0) -> None:
    """Wait for events returned by `ScriptedSurface.post`, bounded."""
    for event in events:
        await wait_for(event.is_set, "the bot to finish handling an event", timeout)
