"""What the client may do with a turn's subagent sessions (announced by the parent's
`subagent_update`, remembered in `SubagentRoutes`): cancel one, where the agent said it may
(the child's `capabilities.cancel`: ACP cancels a child's current work with `session/cancel` on
the child's own session id, without ending the session or the parent's turn); and know a
child's request (a permission, a question, `fs/*`, `terminal/*`) as one of its parent's turn.
Only ids the routes know for that parent count: a frame cannot name another session's child."""

from __future__ import annotations

import logging

from acp.agent_reports import SubagentRoute, SubagentRoutes
from acp.client import AcpError
from acp.session_handle import AcpRuntimeError, SessionHandle

log = logging.getLogger(__name__)


class AcpSubagentNotRunning(AcpError):
    """A cancel named a session that is not a cancellable subagent of the running turn."""

    def __init__(self, child_id: str) -> None:
        self.child_id = child_id
        super().__init__(
            "That subagent is no longer running in this turn, or the agent does not let it be "
            "stopped on its own",
            kind="subagent_not_running",
        )


def child_of(routes: SubagentRoutes, parent_id: str, child_id: str) -> SubagentRoute | None:
    """The route of `child_id` when it is a subagent of `parent_id` (None otherwise)."""
    route = routes.get(child_id)
    return route if route is not None and route.parent_id == parent_id else None


async def cancel_subagent(
    handle: SessionHandle, parent_id: str, turn_running: bool, child_id: str
) -> None:
    """Send `session/cancel` for the child `child_id` of `parent_id`'s running turn. Raises
    `AcpSubagentNotRunning` for any other id, or a child the agent did not let us cancel."""
    route = child_of(handle.subagents, parent_id, child_id)
    if not turn_running or route is None or not route.can_cancel:
        raise AcpSubagentNotRunning(child_id)
    try:
        await handle.notify("session/cancel", {"sessionId": child_id})
    except AcpRuntimeError:
        log.debug("subagent cancel not sent: the agent is gone")
