"""`session/load` read from the session's inbox: the replayed history swallowed, the state the
agent sends meanwhile kept, the answer returned."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio

from acp.inbox import AgentGone, Answered, drain_notifications, inbox_for
from acp.session_handle import AcpRequestTimeout, RpcReply, SessionHandle


async def load_session(
    handle: SessionHandle,
    session_id: str,
    params: dict[str, Any],
    *,
    idle_timeout: float,
    hard_timeout: float,
    observe: Callable[[str, Any], None] | None = None,
) -> RpcReply:
    """Send session/load and swallow the replayed history. Each replayed frame extends the
    deadline (a long history is slow, not stuck), up to a hard cap; an unknown id may hang."""
    inbox = inbox_for(handle, session_id)
    inbox.items.clear()
    request_id = await handle.send_request("session/load", params, inbox.deliver)
    hard_deadline = time.monotonic() + hard_timeout
    try:
        while True:
            limit = min(time.monotonic() + idle_timeout, hard_deadline)
            with anyio.move_on_after(max(0.0, limit - time.monotonic())):
                await inbox.wait()
            if not inbox.items:
                capped = time.monotonic() >= hard_deadline
                raise AcpRequestTimeout("session/load", hard_timeout if capped else idle_timeout)
            while inbox.items:
                item = inbox.items.popleft()
                if type(item) is tuple:
                    if observe is not None:
                        observe(*item)  # replayed history is not state; the rest is
                elif type(item) is Answered:
                    return item.reply
                elif type(item) is AgentGone:
                    raise item.cause
    finally:
        handle.forget(request_id)
        if observe is not None:  # read in the same chunk as the answer: after the replay
            drain_notifications(inbox.items, observe)
        inbox.items.clear()
