"""An agent's `elicitation/create` answered: read (`acp.elicitation_schema`), then asked of a
person through the session's running turn, whose consumer answers the `PendingElicitation` it
yields. What cannot be asked is answered here: malformed params -32602; a link that is not
http(s) (or a mode we do not know) `decline`, logged, never shown; no turn running on the
session `cancel` (nobody is there to answer); the agent withdrawing its request
(`$/cancel_request`) stops the wait."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from acp.elicitation import (
    CANCELLED,
    DECLINED,
    ElicitationAnswer,
    OpenLinks,
    PendingElicitation,
)
from acp.elicitation_schema import ElicitationMalformed, ElicitationRefused, read_elicitation
from acp.session_handle import RpcReply
from acp.workspace_files import INVALID_PARAMS

log = logging.getLogger(__name__)


class Asker(Protocol):
    """What answers the question: the session's running turn (`PromptTurn`)."""

    async def ask_elicitation(self, pending: PendingElicitation) -> ElicitationAnswer: ...


async def answer_elicitation(
    params: Any, turn_of: Callable[[str], Asker | None], links: OpenLinks, *, subagent: str = ""
) -> RpcReply:
    """The reply to one `elicitation/create`; `turn_of(session_id)` is the session's running
    turn (None: none runs); a URL elicitation is kept in `links` for its `elicitation/complete`.
    `subagent`: the title of the turn's subagent that asks (its params name the parent)."""
    try:
        request = read_elicitation(params)
    except ElicitationMalformed as exc:
        log.warning("answering -32602 to the agent's %s", exc)
        return RpcReply(error={"code": INVALID_PARAMS, "message": f"Invalid params: {exc.what}"})
    except ElicitationRefused as exc:
        log.warning("answering decline: %s", exc)
        return RpcReply(result=DECLINED.wire())
    turn = turn_of(request.session_id) if request.session_id else None
    if turn is None:
        log.warning("an elicitation outside a prompt turn: answering cancel")
        return RpcReply(result=CANCELLED.wire())
    pending = PendingElicitation(replace(request, subagent=subagent) if subagent else request)
    if request.mode == "url":
        links.add(pending)
    try:
        answer = await turn.ask_elicitation(pending)
    finally:
        if not pending.answered:  # the agent withdrew it: our task was cancelled
            pending.withdraw()
    return RpcReply(result=answer.wire())
