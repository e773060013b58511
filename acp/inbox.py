"""A session's inbox: everything that reaches one session, in arrival order, for the one task
that reads it (a prompt turn, or `load_session` during session/load), and what it can hold.

The reader dispatches on each item's type. A notification is most of what an inbox ever holds
(every streamed chunk a turn does not take on the reader's stack), so it stays a bare
`(method, params)` pair: a tuple costs a fifth of a class instance, and no other item is one."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from acp.elicitation import PendingElicitation
from acp.session_handle import AcpRuntimeError, RpcReply, SessionHandle
from acp.types import PendingPermission, TerminalActivity

Notification = tuple[str, Any]  # (method, params) of a notification for the session


@dataclass(frozen=True, slots=True)
class Answered:
    """The agent's reply to the request whose answer the reader waits for (session/prompt,
    session/load), queued behind the frames that came before it."""

    reply: RpcReply


@dataclass(frozen=True, slots=True)
class AgentGone:
    """The agent process died or its pipe broke: nothing more will arrive."""

    cause: AcpRuntimeError


@dataclass(frozen=True, slots=True)
class PermissionAsked:
    """A request for a person's approval (the agent's, or Switchboard's own card), shown as the
    turn's next event."""

    pending: PendingPermission


@dataclass(frozen=True, slots=True)
class ElicitationAsked:
    """The agent's question for a person (`elicitation/create`), shown as the turn's next event."""

    pending: PendingElicitation


@dataclass(frozen=True, slots=True)
class TerminalRan:
    """A terminal of the session ran or printed something (for the reply's status line)."""

    activity: TerminalActivity


@dataclass(frozen=True, slots=True)
class TextTakerFailed:
    """What the turn's `on_text` raised on the reader's stack, where it must not escape (the
    reader serves every session): the turn raises it instead."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Wake:
    """One of the turn's timers fired: its deadline or its cancel grace."""


WAKE: Final = Wake()

InboxItem = (
    Notification
    | Answered
    | AgentGone
    | PermissionAsked
    | ElicitationAsked
    | TerminalRan
    | TextTakerFailed
    | Wake
)


class SessionInbox:
    """Ordered items for one session, consumed by one task (a `SessionSink` of the handle).

    The consumer drains `items` (everything that has arrived) and calls `wait` only once they
    are empty, so a burst of frames costs it one wake-up. Every streamed chunk of a busy bot is
    such a wake-up, so it is kept cheap: a bare future of the running asyncio loop (Switchboard
    runs anyio on asyncio only), made only when the consumer really has to wait, rather than a
    new `anyio.Event` (three objects and a waiter list) per chunk. Cancelling the waiting task
    cancels the future, as with any anyio primitive. `push` is called on the loop's thread."""

    __slots__ = ("_waiter", "items", "take_now")

    def __init__(self) -> None:
        self.items: deque[InboxItem] = deque()
        self._waiter: asyncio.Future[None] | None = None
        # A turn's synchronous taker of notifications (`PromptTurn.take_text`): it may consume
        # one on the reader's stack when nothing is queued ahead of it, so that an ordinary text
        # chunk costs no task switch at all. It answers False for anything it leaves queued.
        self.take_now: Callable[[str, Any], bool] | None = None

    def push_notification(self, method: str, params: Any) -> None:
        take_now = self.take_now
        if take_now is None or self.items or not take_now(method, params):
            self.push((method, params))

    def agent_gone(self, cause: AcpRuntimeError) -> None:
        self.push(AgentGone(cause))

    def push(self, item: InboxItem) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # done: cancelled, and the consumer is on its way out
                waiter.set_result(None)

    def deliver(self, reply: RpcReply | AcpRuntimeError) -> None:
        """A request's reply sink (`SessionHandle.send_request`): the reply goes behind the
        frames before it; the agent's death, as any other."""
        self.push(Answered(reply) if isinstance(reply, RpcReply) else AgentGone(reply))

    async def wait(self) -> None:
        """Return once `items` is not empty (at once, without a checkpoint, when it is not)."""
        while not self.items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None


def inbox_for(handle: SessionHandle, session_id: str) -> SessionInbox:
    """The session's inbox on `handle`: the one it has (session/load opened it before the
    session object exists), else a new one."""
    inbox = handle.inbox_of(session_id)
    if isinstance(inbox, SessionInbox):
        return inbox
    inbox = SessionInbox()
    handle.open_inbox(session_id, inbox)
    return inbox


def drain_notifications(items: deque[InboxItem], observe: Callable[[str, Any], None]) -> None:
    """Hand the queued notifications nobody will read as a turn's to the state keeper, and
    drop them (each is read once: a notice is said once); other items stay, in order."""
    for _ in range(len(items)):
        item = items.popleft()
        if type(item) is tuple:
            observe(*item)
        else:
            items.append(item)
