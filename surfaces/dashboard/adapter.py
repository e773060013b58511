"""The dashboard surface: a web chat served on the HTTP server of `switchboard run`.

One page; a person's conversations are its tabs. A conversation is
`ConversationKey("dashboard", user id, tab id)`, so "new tab" is a new conversation (the
dashboard's `/new`) and the engine does not know it is a web page. Replies stream over a
WebSocket: every `send` / `edit` becomes a `message` frame carrying the message's whole current
HTML (so a page that reconnects is simply sent each message again, a stream in progress
included). What the bot sends is `role: agent`; approvals, withdrawn approvals and answers only
the presser sees are `role: notice`; what the person typed is `role: user`. A refusal is
recognised by its lead line and rendered as one card (convert.py).

Files: the bot's files (a `.diff` beside an approval card, the agent's files) are kept in memory
(files.py) and shown as a `kind: file` message whose link downloads it, for the person who sees
that conversation only; a person cannot attach files yet."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

import anyio
import anyio.abc
from aiohttp import web

from config.settings import DashboardSettings
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
)
from surfaces.bounded import BoundedMap
from surfaces.dashboard import page
from surfaces.dashboard.auth import Session, SessionBook, TokenBook
from surfaces.dashboard.convert import FrameRefused, parse_frame, plain_html, render
from surfaces.dashboard.errors import BAD_FRAME, NOT_READY, NOT_YOURS, STALE_BUTTON
from surfaces.dashboard.files import MAX_FILE_BYTES, FileShelf
from surfaces.dashboard.page import OpsAct, OpsSnapshot
from surfaces.dashboard.sign_in_limit import SignInLimiter
from surfaces.dashboard.sockets import Conversation, Hub, Shown, bound_person, send
from surfaces.errors import FileRefused, MessageGone
from surfaces.lanes import Lanes
from surfaces.links import renderable
from surfaces.live import EditedLive

__all__ = ["SURFACE", "DashboardSurface"]

log = logging.getLogger(__name__)

SURFACE = "dashboard"
MAX_CONVERSATIONS = 2000  # remembered in all; the oldest is forgotten first
MAX_TABS = 20  # per person


class DashboardSurface:
    name = SURFACE

    # ---- capabilities ---------------------------------------------------------------------
    def __init__(
        self,
        settings: DashboardSettings,
        *,
        sign_in_attempts: int = 5,
        sign_in_window: float = 60.0,
        max_chars: int = 20_000,
        min_edit_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        session_sweep: float = 1.0,
    ) -> None:
        self.capabilities = SurfaceCapabilities(
            max_chars=max_chars,
            min_edit_interval=min_edit_interval,
            can_edit=True,
            message_buttons=True,
            max_upload_bytes=MAX_FILE_BYTES,
            agent_menus=True,
        )
        self._settings = settings
        self.tokens = TokenBook(settings.tokens)
        self.sessions = SessionBook(lifetime=settings.session_hours * 3600, clock=clock)
        self.limiter = SignInLimiter(sign_in_attempts, sign_in_window, clock=clock)
        self._session_sweep = session_sweep  # s between looks for sessions that expired
        self._hub = Hub(settings.admins)
        self._files = FileShelf()
        self._conversations: BoundedMap[str, Conversation] = BoundedMap(MAX_CONVERSATIONS)
        self._commands: list[dict[str, str]] = []
        self.ops_snapshot: OpsSnapshot | None = None
        self.ops_act: OpsAct | None = None
        self._on_event: OnEvent | None = None
        self._messages: Lanes[ConversationKey, Inbound] = Lanes(
            self._deliver, failure="the bot failed on a dashboard message in %s", logger=log
        )
        self._presses: Lanes[str, ChoiceAnswer] = Lanes(
            self._deliver, failure="the bot failed on a dashboard button in %s", logger=log
        )

    def render(self, markdown: str) -> str:
        return render(markdown)

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        self._commands = [{"name": name, "description": text} for name, text in commands]

    def add_routes(self, app: web.Application) -> None:
        """The page, sign-in and the WebSocket on the HTTP server's Application."""
        page.mount(app, self)

    def set_operations(self, snapshot: OpsSnapshot, act: OpsAct) -> None:
        """The bot's operations view: shown to admins only (page.py checks)."""
        self.ops_snapshot, self.ops_act = snapshot, act

    def is_admin(self, user: str) -> bool:
        return user in self._settings.admins

    def may_sign_in(self, user: str) -> bool:
        """Deny by default: a token of someone on none of the access lists signs nobody in."""
        access = self._settings
        return user in {*access.allowed_users, *access.approvers, *access.admins}

    # ---- lifecycle --------------------------------------------------------------------------
    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hand what browsers send to the bot until cancelled (the HTTP server is not ours)."""
        try:
            async with anyio.create_task_group() as tg:
                self._on_event = on_event
                self._messages.open(tg)
                self._presses.open(tg)
                tg.start_soon(self._close_ended_sessions)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._on_event = None
            self._messages.close()
            self._presses.close()

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._hub.close_all()

    async def end_session(self, session_id: str, reason: str) -> None:
        """Sign-out or a new sign-in: the session ends and its sockets are closed now."""
        self.sessions.close(session_id)
        await self._hub.end_session(session_id, reason)

    async def _close_ended_sessions(self) -> None:
        """Sockets whose session expired (or was forgotten) are closed within a sweep."""
        while True:
            await anyio.sleep(self._session_sweep)
            for session_id in self._hub.session_ids():
                if self.sessions.find(session_id) is None:
                    await self._hub.end_session(session_id, "session expired")

    # ---- inbound ----------------------------------------------------------------------------
    async def connected(self, session: Session, socket: web.WebSocketResponse) -> None:
        """A signed-in page: its conversations (a first one if it has none) and their state."""
        self._hub.join(session.user, session.id, socket)
        if not any(c.owner == session.user for c in self._conversations.values()):
            self._new_conversation(session.user)
        await send(
            socket,
            {
                "type": "hello",
                "user": session.user,
                "commands": self._commands,
            },
        )
        for conversation in list(self._conversations.values()):
            if self._hub.sees(session.user, conversation):
                await send(socket, conversation.tab_frame())
                for shown in list(conversation.messages.values()):
                    await send(socket, shown.frame(conversation))
                if conversation.agent_commands:
                    await send(socket, _menu_frame(conversation))

    def disconnected(self, session: Session, socket: web.WebSocketResponse) -> None:
        self._hub.leave(session.user, session.id, socket)

    async def received(self, session: Session, data: object) -> None:
        """One frame from a signed-in page, checked before anything acts on it."""
        try:
            frame = parse_frame(data)
        except FrameRefused as exc:
            log.info("dashboard frame from %r refused: %s", session.user, exc.reason)
            await self._hub.tell(session.user, _notice_frame("", BAD_FRAME))
            return
        if frame.type == "new_tab":
            created = self._new_conversation(session.user)
            await self._hub.publish(created, {**created.tab_frame(), "created": True})
            return
        conversation = self._conversations.get(frame.tab)
        if conversation is None or not self._hub.sees(session.user, conversation):
            await self._hub.tell(session.user, _notice_frame(frame.tab, NOT_YOURS))
            return
        if self._on_event is None:
            await self._hub.tell(session.user, _notice_frame(frame.tab, NOT_READY))
            return
        user = UserRef(session.user)
        if frame.type == "send":
            shown = Shown(_new_id(), "user", plain_html(frame.text))
            self._keep(conversation, shown)
            await self._hub.publish(conversation, shown.frame(conversation))
            self._messages.put(
                conversation.key, Inbound(conversation.key, user, frame.text, _new_id())
            )
        elif not conversation.offers(frame.token):
            await self._hub.tell(session.user, _notice_frame(frame.tab, STALE_BUTTON))
        else:

            async def notify(text: str) -> None:
                await self._hub.tell(session.user, _notice_frame(conversation.tab, text))

            event_id = _new_id()
            answer = ChoiceAnswer(conversation.key, user, frame.token, event_id, notify)
            self._presses.put(event_id, answer)

    async def _deliver(self, event: Inbound | ChoiceAnswer) -> None:
        on_event = self._on_event
        if on_event is not None:
            await on_event(event)

    # ---- outbound ---------------------------------------------------------------------------
    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> MessageRef:
        conversation = self._conversation_of(key)
        shown = Shown(
            _new_id(), "agent", _html(text, formatted), self._shown(buttons), final=formatted
        )
        self._keep(conversation, shown)
        await self._hub.publish(conversation, shown.frame(conversation))
        return MessageRef(key, shown.id)

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        conversation = self._conversation_of(ref.key)
        shown = conversation.messages.get(ref.id)
        if shown is None:
            raise MessageGone(f"Dashboard message {ref.id} is no longer kept")
        html, wanted = _html(text, formatted), self._shown(buttons)
        if (html, wanted, formatted) == (shown.html, shown.buttons, shown.final):
            return  # the page shows this already
        # Unchanged buttons are not sent again: the page keeps their elements, so a press that
        # began on one (mouse down) ends on the same one while the text streams on.
        resend = wanted != shown.buttons
        shown.html, shown.buttons, shown.final = html, wanted, formatted
        self._keep(conversation, shown)
        await self._hub.publish(conversation, shown.frame(conversation, buttons=resend))

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        if len(file.data) > MAX_FILE_BYTES:
            raise FileRefused(f"it is larger than {MAX_FILE_BYTES} bytes", limit=MAX_FILE_BYTES)
        conversation = self._conversation_of(key)
        url = f"/api/files/{self._files.keep(conversation.tab, file)}"
        link = f'<a href="{url}" download="{escape(file.name)}">{escape(file.name)}</a>'
        caption = plain_html(file.caption)
        shown = Shown(
            _new_id(), "agent", f'<div class="file">{link}</div>{caption}', kind="file",
            final=True, file_name=file.name, file_url=url,
        )  # fmt: skip
        self._keep(conversation, shown)
        await self._hub.publish(conversation, shown.frame(conversation))
        return MessageRef(key, shown.id)

    def file_of(self, user: str, file_id: str) -> OutgoingFile | None:
        """A kept file, if `user` sees the conversation it was sent to."""
        kept = self._files.get(file_id)
        conversation = self._conversations.get(kept.tab) if kept else None
        if kept is None or conversation is None or not self._hub.sees(user, conversation):
            return None
        return kept.file

    def open_live(self, key: ConversationKey) -> LiveReply:
        # The kit's: send and edit do not pace, and a reply streams by edits of its message.
        return EditedLive(self, key)

    async def typing(self, key: ConversationKey) -> None:
        return None  # the streaming message and its status line show that the agent works

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        conversation = self._conversation_of(key)
        ours = {entry["name"].lstrip("/") for entry in self._commands}
        conversation.agent_commands = [
            {
                # a name that clashes with one of ours is the agent's when doubled (//name)
                "text": ("//" if command.name in ours else "/") + command.name,
                "description": command.description,
                "hint": command.hint,
            }
            for command in commands
        ]
        await self._hub.publish(conversation, _menu_frame(conversation))

    # ---- choices ----------------------------------------------------------------------------
    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        conversation = self._conversation_of(key)
        shown = Shown(_new_id(), "notice", plain_html(prompt), self._shown(choices), kind="choice")
        self._keep(conversation, shown)
        await self._hub.publish(conversation, shown.frame(conversation))
        return MessageRef(key, shown.id)

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        conversation = self._conversation_of(ref.key)
        shown = conversation.messages.get(ref.id)
        if shown is None:
            return  # forgotten already: nothing shows its buttons any more
        shown.html = plain_html(f"{prompt}\n\n{outcome}")
        shown.buttons = ()
        self._keep(conversation, shown)
        await self._hub.publish(conversation, shown.frame(conversation))

    # ---- helpers ----------------------------------------------------------------------------
    def _shown(self, buttons: Sequence[Choice]) -> tuple[Choice, ...]:
        """The buttons the page gets: a link only with an http(s) url (`surfaces.links`)."""
        return tuple(renderable(buttons, surface=self.name))

    def _keep(self, conversation: Conversation, shown: Shown) -> None:
        """Kept for reconnecting pages, within the conversation's and its person's bounds."""
        conversation.messages.keep(shown)
        owner = conversation.owner
        bound_person((c for c in self._conversations.values() if c.owner == owner), shown)

    def _new_conversation(self, user: str) -> Conversation:
        mine = [tab for tab, c in self._conversations.items() if c.owner == user]
        for tab in mine[: max(len(mine) - MAX_TABS + 1, 0)]:
            del self._conversations[tab]  # a person's oldest tab goes past MAX_TABS
        tab = "t" + secrets.token_hex(6)
        number = len(mine) - max(len(mine) - MAX_TABS + 1, 0) + 1
        conversation = Conversation(
            ConversationKey(SURFACE, user, tab), user, tab, f"Conversation {number}"
        )
        self._conversations.remember(tab, conversation)
        return conversation

    def _conversation_of(self, key: ConversationKey) -> Conversation:
        """The conversation of a key the bot speaks to; one it forgot (or never had, e.g. after
        a restart) is taken up again as a tab of that person."""
        conversation = self._conversations.get(key.thread)
        if conversation is None or conversation.key != key:
            tab = key.thread or "t" + secrets.token_hex(6)
            conversation = Conversation(key, key.chat, tab, "Conversation")
            self._conversations.remember(tab, conversation)
        return conversation


def _html(text: str, formatted: bool) -> str:
    """`formatted` text is `render()` output, already safe; anything else is plain text."""
    return text if formatted else plain_html(text)


def _new_id() -> str:
    return secrets.token_hex(8)


def _notice_frame(tab: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "tab": tab,
        "id": _new_id(),
        "role": "notice",
        "kind": "message",
        "html": plain_html(text),
        "final": True,
        "buttons": [],
    }


def _menu_frame(conversation: Conversation) -> dict[str, Any]:
    return {
        "type": "agent_commands",
        "tab": conversation.tab,
        "commands": conversation.agent_commands,
    }
