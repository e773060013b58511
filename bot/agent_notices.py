"""What the agent reports outside a reply (`SessionNotice`s: its approvals switched back on, kiro's
compaction and the like): said in the conversation in order, one task at a time, and the gate
put back on the record."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

from acp import NoticeKind, SessionNotice
from bot.notices import session_notice_text
from bot.services import ConversationServices
from surfaces.base import ConversationKey, UserRef

log = logging.getLogger(__name__)

# Agent notices waiting to be said in one conversation; an agent that floods them loses the oldest.
NOTICE_BACKLOG = 16


class AgentNotices:
    """One conversation's agent notices. `requester` names whose message started the latest turn
    there (notices speak to them, and the audit records them)."""

    def __init__(
        self,
        services: ConversationServices,
        key: ConversationKey,
        prefix: str,
        say: Callable[[str], Awaitable[None]],
        requester: Callable[[], UserRef | None],
    ) -> None:
        self.services = services
        self.key = key
        self._prefix = prefix  # the surface's spelling of our commands
        self._say = say
        self._requester = requester
        self._waiting: deque[str] = deque(maxlen=NOTICE_BACKLOG)
        self._telling = False  # a task is saying `_waiting`

    def heard(self, notice: SessionNotice) -> None:
        """From the frame reader (it must not block): said in order, by one task at a time, in
        the app's task group."""
        self._waiting.append(session_notice_text(notice, self._requester(), self._prefix))
        if notice.kind is NoticeKind.GATE_RESTORED:
            self.services.spawn(lambda: self._audit_gate_restored(notice))
        if not self._telling:
            self._telling = True
            self.services.spawn(self._tell)

    async def _audit_gate_restored(self, notice: SessionNotice) -> None:
        """The agent switched its approvals off and Switchboard put them back: on the record,
        against the person whose message started the latest turn here."""
        who = self._requester()
        await self.services.audit.refused(
            self.key.surface,
            who.id if who is not None else "",
            "agent switched approvals off",
            conversation=str(self.key),
            agent_set=notice.previous,
            restored=notice.detail,
        )

    async def _tell(self) -> None:
        try:
            while self._waiting:
                text = self._waiting.popleft()
                try:
                    await self._say(text)
                except Exception as exc:  # a surface failure: this notice only
                    log.warning("could not tell %s an agent notice: %r", self.key, exc)
        finally:
            self._telling = False
