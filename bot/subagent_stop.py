"""A running subagent's own Stop (issue 24): where the agent says a subagent of the turn may be
cancelled (`SubagentReport.can_cancel`), the live reply carries a "Stop <title>" button beside
the turn's Stop, one per running subagent, the latest `MAX_SUBAGENT_STOPS`. Each is a one-time
token (`substop:`) of its conversation. A press is the turn's Stop's rules: the person who asked,
approvers and admins; a press from another conversation refused through
`ApprovalBroker.refuse_misplaced` (audited, told as an unknown token); once. It cancels only the
subagent's work (`AcpSession.cancel_subagent`: `session/cancel` on the child's session); the
turn goes on."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from acp import AcpSession, AcpSubagentNotRunning, SubagentReport
from bot.access import AccessPolicy
from bot.audit import AuditLog
from bot.permissions import ApprovalBroker
from bot.reply import ReplyStream
from surfaces.base import Choice, ChoiceAnswer, ConversationKey, UserRef

log = logging.getLogger(__name__)

SUBSTOP_TOKEN_PREFIX = "substop:"
MAX_SUBAGENT_STOPS = 2  # buttons beside the turn's Stop: a chat's button row stays short
LABEL_CHARS = 24  # "Stop " and the subagent's short title
_QUIET_STATES = frozenset({"idle"})  # a subagent with no work to stop

Tell = Callable[[ChoiceAnswer, str], Awaitable[None]]


class _Sessions(Protocol):
    @property
    def current(self) -> AcpSession | None: ...


class StopsHolder(Protocol):
    """What a press reads of a conversation (`ChatRunner`)."""

    @property
    def key(self) -> ConversationKey: ...

    @property
    def last_requester(self) -> UserRef | None: ...

    @property
    def sessions(self) -> _Sessions: ...

    @property
    def subagent_stops(self) -> SubagentStops: ...


def _label(title: str | None) -> str:
    title = " ".join((title or "subagent").split())
    room = LABEL_CHARS - len("Stop ")
    return "Stop " + (title if len(title) <= room else title[: room - 1] + "…")


class SubagentStops:
    """A conversation's subagent Stop buttons while its turn's reply is live: tokens by child
    session, the children already stopped (a second press finds nothing), and the reply whose
    buttons they join (with the turn's own Stop first)."""

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}  # child session id -> its button's token
        self._children: dict[str, tuple[str, str]] = {}  # token -> (child id, title)
        self._pressed: set[str] = set()  # children stopped in this turn
        self._reply: ReplyStream | None = None
        self._turn_stop: Choice | None = None
        self._shown: tuple[Choice, ...] = ()

    def start(self, reply: ReplyStream, turn_stop: Choice) -> None:
        """The turn's live reply and its Stop button: shown now, subagents' join them later."""
        self._reply, self._turn_stop = reply, turn_stop
        self._shown = (turn_stop,)
        reply.set_buttons(self._shown)

    def end(self) -> None:
        """The turn's reply is no longer live: every token from now on finds nothing."""
        self._tokens.clear()
        self._children.clear()
        self._pressed.clear()
        self._reply = self._turn_stop = None
        self._shown = ()

    def holds(self, token: str) -> bool:
        return token in self._children

    def child_of(self, token: str) -> tuple[str, str] | None:
        """(child session id, title) of a button still live, None for any other token."""
        return self._children.get(token)

    def take(self, token: str) -> tuple[str, str] | None:
        """The button's child, once: its button goes and a second press finds nothing."""
        child = self._children.pop(token, None)
        if child is not None:
            self._tokens.pop(child[0], None)
            self._pressed.add(child[0])
            rest = [SubagentReport(c, title=t) for c, t in self._children.values()]
            self._refresh(rest)
        return child

    def show(self, subagents: Iterable[SubagentReport]) -> None:
        """The buttons for the turn's subagents as the live status knows them (oldest first):
        the latest running ones that may be cancelled and were not stopped yet."""
        if self._reply is None:
            return
        wanted = [
            sub
            for sub in subagents
            if sub.can_cancel
            and sub.state not in _QUIET_STATES
            and sub.session_id not in self._pressed
        ][-MAX_SUBAGENT_STOPS:]
        self._refresh(wanted)

    def _refresh(self, wanted: list[SubagentReport]) -> None:
        if self._reply is None or self._turn_stop is None:
            return
        keep = {sub.session_id for sub in wanted}
        for child in [c for c in self._tokens if c not in keep]:
            self._children.pop(self._tokens.pop(child), None)
        buttons = [self._turn_stop]
        for sub in wanted:
            token = self._tokens.get(sub.session_id)
            if token is None:
                token = self._tokens[sub.session_id] = f"{SUBSTOP_TOKEN_PREFIX}{uuid.uuid4().hex}"
            self._children[token] = (sub.session_id, sub.title or "subagent")
            buttons.append(Choice(token, _label(sub.title), "danger"))
        if tuple(buttons) != self._shown:
            self._shown = tuple(buttons)
            self._reply.set_buttons(self._shown)


async def subagent_stop_pressed(
    press: ChoiceAnswer,
    runner: StopsHolder | None,
    conversations: Iterable[StopsHolder],
    approvals: ApprovalBroker,
    access: AccessPolicy,
    audit: AuditLog,
    tell: Tell,
) -> None:
    """A subagent's Stop button pressed: its subagent's work cancelled, the turn goes on."""
    child = runner.subagent_stops.child_of(press.token) if runner is not None else None
    if runner is None or child is None:
        shown = [r.key for r in conversations if r.subagent_stops.holds(press.token)]
        await approvals.refuse_misplaced(press, shown[0] if shown else None, "substop")
        await tell(press, "That subagent has already finished.")
        return
    requester = runner.last_requester
    requester_id = requester.id if requester is not None else ""
    if not access.may_approve(press.key.surface, press.user, requester_id):
        who = requester.label if requester is not None else "the person who asked"
        await tell(press, f"Only {who} or an approver can stop this subagent.")
        log.info("refused a subagent stop press from %s", press.user.id)
        await audit.refused(press.key.surface, press.user.id, "substop", requester=requester_id)
        return
    taken = runner.subagent_stops.take(press.token)
    session = runner.sessions.current
    if taken is None or session is None:
        await tell(press, "That subagent has already finished.")
        return
    child_id, title = taken
    try:
        await session.cancel_subagent(child_id)
    except AcpSubagentNotRunning as exc:
        await tell(press, f"{exc.what}.")
        return
    log.info("%s: %s stopped the subagent %s", press.key, press.user.id, child_id)
    await tell(press, f"Stopping the subagent {title}; the turn goes on.")
