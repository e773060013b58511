"""The browsers of signed-in people and what their conversations show.

Each conversation keeps its recent messages as they stand now (the current text of a reply that
is still streaming included), so a page that reloads or reconnects is sent the state again and a
stream in progress goes on where it is. What is kept is bounded in count and in bytes, per
conversation and per person (all of a person's conversations together: however many tabs send
text, they cannot hold more), the oldest messages forgotten first. A person's sockets receive
their own conversations; an admin's receive every conversation. Sockets are also known by their
session, so ending a session (sign-out, expiry, a new sign-in) closes its sockets."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web

from surfaces.base import Choice, ConversationKey
from surfaces.dashboard.convert import button_frame
from surfaces.dashboard.errors import GONE_SOCKET

__all__ = ["SESSION_ENDED", "Conversation", "Hub", "Kept", "Shown", "bound_person"]

log = logging.getLogger(__name__)

RECENT_MESSAGES = 200  # per conversation, what a reconnecting page is sent
CONVERSATION_BYTES = 1024 * 1024  # kept per conversation (a message is at most ~256 KB)
PERSON_BYTES = 4 * 1024 * 1024  # kept per person, all their conversations together
SESSION_ENDED = 4401  # the close code of a socket whose session ended (4000-4999: the app's)
CLOSE_WAIT = 2.0  # s a closing socket's browser gets to answer before it is cut off


@dataclass(slots=True)
class Shown:
    """One message as the page shows it. `role`: user | agent | notice; `kind`: message |
    choice (an approval: buttons are its options) | file (a link to download it)."""

    id: str
    role: str
    html: str
    buttons: tuple[Choice, ...] = ()
    kind: str = "message"
    final: bool = False  # rendered in its final form (a live reply's text is plain until then)
    file_name: str = ""  # kind "file": the file's name and the url it is downloaded from
    file_url: str = ""

    def size(self) -> int:
        """Roughly the bytes it holds: its HTML and its buttons (UTF-8)."""
        buttons = sum(
            len(b.token) + len(b.label.encode()) + len(b.style) + len(b.url) for b in self.buttons
        )
        return len(self.html.encode("utf-8", "surrogatepass")) + buttons

    def frame(self, conversation: Conversation, *, buttons: bool = True) -> dict[str, Any]:
        """The message as a frame; without `buttons` the frame has no "buttons" key and the page
        keeps the button elements it shows (a press in progress on one must land)."""
        frame: dict[str, Any] = {
            "type": "message",
            "tab": conversation.tab,
            "id": self.id,
            "role": self.role,
            "kind": self.kind,
            "html": self.html,
            "final": self.final,
        }
        if self.file_url:
            frame["name"], frame["url"] = self.file_name, self.file_url
        if buttons:
            frame["buttons"] = [button_frame(b) for b in self.buttons]
        return frame


class Kept:
    """A conversation's recent messages in order, with the bytes they hold."""

    def __init__(self) -> None:
        self._messages: OrderedDict[str, Shown] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.bytes = 0

    def get(self, message_id: str) -> Shown | None:
        return self._messages.get(message_id)

    def values(self) -> list[Shown]:
        return list(self._messages.values())

    def keep(self, shown: Shown) -> None:
        """A new message (last), or one whose text changed (where it was); then the oldest
        others are forgotten past the conversation's bounds."""
        self._messages.setdefault(shown.id, shown)
        size = shown.size()
        self.bytes += size - self._sizes.get(shown.id, 0)
        self._sizes[shown.id] = size
        while len(self._messages) > 1 and (
            len(self._messages) > RECENT_MESSAGES or self.bytes > CONVERSATION_BYTES
        ):
            if not self.forget_oldest(but=shown.id):
                break

    def forget_oldest(self, *, but: str) -> bool:
        """Forget the oldest message other than `but`; False when there is none."""
        oldest = next((i for i in self._messages if i != but), None)
        if oldest is None:
            return False
        del self._messages[oldest]
        self.bytes -= self._sizes.pop(oldest)
        return True


@dataclass(slots=True)
class Conversation:
    key: ConversationKey
    owner: str
    tab: str
    title: str
    messages: Kept = field(default_factory=Kept)
    agent_commands: list[dict[str, str]] = field(default_factory=list)

    def offers(self, token: str) -> bool:
        """Whether a message shown here carries a button with this token now (a link's token
        is never pressed back)."""
        return any(
            b.token == token and not b.url
            for shown in self.messages.values()
            for b in shown.buttons
        )

    def tab_frame(self) -> dict[str, Any]:
        return {"type": "tab", "tab": self.tab, "title": self.title, "owner": self.owner}


def bound_person(conversations: Iterable[Conversation], kept: Shown) -> None:
    """Forget a person's oldest messages, from their fullest conversation first, until all of
    their conversations together hold at most PERSON_BYTES (never `kept`, just written)."""
    mine = list(conversations)
    total = sum(c.messages.bytes for c in mine)
    while total > PERSON_BYTES:
        for fullest in sorted(mine, key=lambda c: c.messages.bytes, reverse=True):
            before = fullest.messages.bytes
            if fullest.messages.forget_oldest(but=kept.id):
                total -= before - fullest.messages.bytes
                break
        else:
            return  # only `kept` is left


class Hub:
    """Open sockets by user and by session; `admins` receive every conversation's frames."""

    def __init__(self, admins: Iterable[str]) -> None:
        self._admins = set(admins)
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        self._sessions: dict[str, set[web.WebSocketResponse]] = {}

    def sees(self, user: str, conversation: Conversation) -> bool:
        return user == conversation.owner or user in self._admins

    def join(self, user: str, session_id: str, socket: web.WebSocketResponse) -> None:
        self._sockets.setdefault(user, set()).add(socket)
        self._sessions.setdefault(session_id, set()).add(socket)

    def leave(self, user: str, session_id: str, socket: web.WebSocketResponse) -> None:
        for index, key in ((self._sockets, user), (self._sessions, session_id)):
            sockets = index.get(key)
            if sockets is not None:
                sockets.discard(socket)
                if not sockets:
                    del index[key]

    def session_ids(self) -> list[str]:
        return list(self._sessions)

    async def end_session(self, session_id: str, reason: str) -> None:
        """Close every socket of a session that ended (the page then finds itself signed out).
        A browser that does not answer the close is cut off after CLOSE_WAIT: a sign-out never
        waits on it longer."""
        sockets = self._sessions.pop(session_id, set())
        with anyio.move_on_after(CLOSE_WAIT):
            async with anyio.create_task_group() as tg:
                for socket in sockets:
                    tg.start_soon(_close, socket, reason)

    async def close_all(self) -> None:
        for sockets in list(self._sockets.values()):
            for socket in list(sockets):
                await socket.close()
        self._sockets.clear()
        self._sessions.clear()

    async def publish(self, conversation: Conversation, frame: dict[str, Any]) -> None:
        for user, sockets in list(self._sockets.items()):
            if self.sees(user, conversation):
                for socket in list(sockets):
                    await send(socket, frame)

    async def tell(self, user: str, frame: dict[str, Any]) -> None:
        for socket in list(self._sockets.get(user, ())):
            await send(socket, frame)


async def _close(socket: web.WebSocketResponse, reason: str) -> None:
    try:
        await socket.close(code=SESSION_ENDED, message=reason.encode())
    except GONE_SOCKET as exc:
        log.debug("dashboard socket gone while closing: %s", type(exc).__name__)


async def send(socket: web.WebSocketResponse, frame: dict[str, Any]) -> None:
    """One frame to one browser; a browser that went away is dropped (it resumes on reconnect)."""
    if socket.closed:
        return
    try:
        await socket.send_json(frame)
    except GONE_SOCKET as exc:
        log.debug("dashboard socket gone while sending: %s", type(exc).__name__)
