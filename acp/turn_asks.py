"""What a prompt turn asks a person while it runs: the agent's permission requests, Switchboard's
own card for a write or a command no approval covers (`authorize`), and the agent's questions
(`elicitation/create`). Each is pushed on the session's inbox, so the turn shows it as its next
event, in order with the rest; whatever is still unanswered when the turn is cancelled or ends is
answered `cancelled` / `cancel` (ACP's rule for a cancelled turn)."""

from __future__ import annotations

import logging

from acp.approval_cover import ClientAction, TurnApprovals
from acp.elicitation import CANCELLED, ElicitationAnswer, PendingElicitation
from acp.inbox import ElicitationAsked, PermissionAsked, SessionInbox
from acp.types import PERMISSION_ALLOW_ONCE, PendingPermission
from acp.workspace_files import ClientRequestRefused

log = logging.getLogger(__name__)


class TurnAsks:
    """One turn's questions for a person, until it ends (`close`)."""

    def __init__(
        self, inbox: SessionInbox, approvals: TurnApprovals, session_id: str, agent: str
    ) -> None:
        self.inbox = inbox
        self.approvals = approvals
        self.session_id = session_id
        self.agent = agent
        self.permissions: list[PendingPermission] = []
        self.elicitations: list[PendingElicitation] = []
        # The turn was cancelled: nothing more is shown, every new question answered cancelled.
        self.closed = False
        # A permission was answered `cancelled` (kiro then reports the turn as a refusal).
        self.answered_cancelled = False

    async def permission(self, pending: PendingPermission) -> str | None:
        """A permission request shown as the turn's next event; the option chosen (None:
        cancelled)."""
        if self.closed:
            return None
        self.permissions.append(pending)
        self.inbox.push(PermissionAsked(pending))
        answer = await pending.wait()
        if answer is None:
            self.answered_cancelled = True
        return answer

    async def elicitation(self, pending: PendingElicitation) -> ElicitationAnswer:
        """The agent's question shown as the turn's next event; the person's answer."""
        if self.closed:
            return CANCELLED
        self.elicitations.append(pending)
        self.inbox.push(ElicitationAsked(pending))
        return await pending.wait()

    def cancel_all(self) -> None:
        """The turn is cancelled or over: what nobody answered is answered cancelled."""
        for permission in self.permissions:
            if not permission.answered:
                self.answered_cancelled = True
                permission.respond(None)
        for elicitation in self.elicitations:
            elicitation.respond(CANCELLED)

    def close(self) -> None:
        self.closed = True
        self.cancel_all()

    async def authorize(self, action: ClientAction) -> None:
        """Run `action` (a write or a command the agent asked of us) only under an approval:
        one that covers it, else the person's answer to Switchboard's own card; otherwise
        ClientRequestRefused, which the agent gets as its request's error."""
        covering = self.approvals.covering(action)
        if covering is not None:
            log.info("%s covered by the approval of %s", action.method, covering)
            return
        log.warning(
            "%s asked for %s with no approval covering it: asking the person",
            self.agent,
            action.tool.describe(),
        )
        pending = action.unasked_request(self.session_id)
        try:
            answer = await self.permission(pending)
        finally:
            if not pending.answered:
                pending.withdraw()
        allow = pending.request.option_of_kind(PERMISSION_ALLOW_ONCE)
        if answer is None or allow is None or answer != allow.option_id:
            why = "the person declined it"
            if answer is None:
                why = "the turn ended before anyone allowed it"
            raise ClientRequestRefused(action.method, why)
        self.approvals.allowed_unasked(action)
