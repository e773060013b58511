"""The browsers of signed-in people and what their conversations show.

Each conversation keeps its recent messages as they stand now (the current text of a reply that
is still streaming included), bounded, so a page that reloads or reconnects is sent the state
again and a stream in progress goes on where it is. A person's sockets receive their own
conversations; an admin's receive every conversation."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from surfaces.base import Choice, ConversationKey
from surfaces.bounded import BoundedMap
from surfaces.dashboard.errors import GONE_SOCKET

__all__ = ["Conversation", "Hub", "Shown"]

log = logging.getLogger(__name__)

RECENT_MESSAGES = 200  # per conversation, what a reconnecting page is sent


@dataclass(slots=True)
class Shown:
    """One message as the page shows it. `role`: user | agent | notice; `kind`: message |
    choice (an approval: buttons are its options)."""

    id: str
    role: str
    html: str
    buttons: tuple[Choice, ...] = ()
    kind: str = "message"
    final: bool = False  # rendered in its final form (a live reply's text is plain until then)

    def frame(self, conversation: Conversation) -> dict[str, Any]:
        return {
            "type": "message",
            "tab": conversation.tab,
            "id": self.id,
            "role": self.role,
            "kind": self.kind,
            "html": self.html,
            "final": self.final,
            "buttons": [
                {"token": b.token, "label": b.label, "style": b.style} for b in self.buttons
            ],
        }


@dataclass(slots=True)
class Conversation:
    key: ConversationKey
    owner: str
    tab: str
    title: str
    messages: BoundedMap[str, Shown] = field(default_factory=lambda: BoundedMap(RECENT_MESSAGES))
    agent_commands: list[dict[str, str]] = field(default_factory=list)

    def offers(self, token: str) -> bool:
        """Whether a message shown here carries a button with this token now."""
        return any(b.token == token for shown in self.messages.values() for b in shown.buttons)

    def tab_frame(self) -> dict[str, Any]:
        return {"type": "tab", "tab": self.tab, "title": self.title, "owner": self.owner}


class Hub:
    """Open sockets by user; `admins` receive every conversation's frames."""

    def __init__(self, admins: Iterable[str]) -> None:
        self._admins = set(admins)
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}

    def sees(self, user: str, conversation: Conversation) -> bool:
        return user == conversation.owner or user in self._admins

    def join(self, user: str, socket: web.WebSocketResponse) -> None:
        self._sockets.setdefault(user, set()).add(socket)

    def leave(self, user: str, socket: web.WebSocketResponse) -> None:
        sockets = self._sockets.get(user)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self._sockets[user]

    async def close_all(self) -> None:
        for sockets in list(self._sockets.values()):
            for socket in list(sockets):
                await socket.close()
        self._sockets.clear()

    async def publish(self, conversation: Conversation, frame: dict[str, Any]) -> None:
        for user, sockets in list(self._sockets.items()):
            if self.sees(user, conversation):
                for socket in list(sockets):
                    await send(socket, frame)

    async def tell(self, user: str, frame: dict[str, Any]) -> None:
        for socket in list(self._sockets.get(user, ())):
            await send(socket, frame)


async def send(socket: web.WebSocketResponse, frame: dict[str, Any]) -> None:
    """One frame to one browser; a browser that went away is dropped (it resumes on reconnect)."""
    if socket.closed:
        return
    try:
        await socket.send_json(frame)
    except GONE_SOCKET as exc:
        log.debug("dashboard socket gone while sending: %s", type(exc).__name__)
