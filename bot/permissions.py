"""Tool approvals: an agent's `session/request_permission` becomes a choice on the surface, and the
answer goes back as an ACP outcome.

Every option gets its own one-time token (button payloads carry our token, never the JSON-RPC id,
which restarts with the agent). Only the person whose prompt started the turn, or an approver,
may answer; the first valid answer consumes every token of the request, so a second press, a
stale button after a restart or a stranger's press is refused. Nobody answering within the
timeout selects a reject option — never `cancelled`, which ends the whole turn on some agents.

A token counts only in the conversation (and on the surface) its card was shown in: a press of
it from anywhere else (a forged update, a relayed press) is refused before anything else is
looked at, audited as "wrong conversation", and answered exactly as an unknown token is, so the
presser learns nothing of it (`refuse_misplaced`; the Stop button's token takes the same check in
bot/app.py). The store keeps each card's message id with its tokens, so cards an earlier process
(or a dead replica) left are closed at start-up and their tokens dropped (`withdraw_left`). The id
is noted once the card is posted: a crash in between leaves that card's buttons, not its tokens.

The trust ladder (bot/trust.py) answers some requests without a card: a rule of this conversation's
session or the project's `approvals` policy. Such an answer is audited as a press is, with the
rule (or policy) as the answerer. A card offers **Trust this tool for this session** beside the
agent's options where the tool's shape can be a rule: its own token, answered to the agent as the
allow_once option, and a rule added; an `allow_always` press adds a rule too, and the card's
closing line says what is allowed from now on."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from acp import (
    PERMISSION_ALLOW_ALWAYS,
    PERMISSION_ALLOW_ONCE,
    PERMISSION_REJECT_ALWAYS,
    PERMISSION_REJECT_ONCE,
    AcpGateViolation,
    PendingPermission,
    PermissionOption,
)
from bot.access import AccessPolicy
from bot.approval_card import DIFF_FILE_AFTER, approval_prompt, card_with_patch
from bot.audit import APPROVAL, AuditLog
from bot.store import ApprovalRecord, StateStore, StoreError
from bot.trust import TRUST_LABEL, Automatic, TrustBook, TrustRule, trustable
from surfaces.base import Choice, ChoiceAnswer, ConversationKey, MessageRef, Surface, UserRef

log = logging.getLogger(__name__)

_STYLE = {
    PERMISSION_ALLOW_ONCE: "primary",
    PERMISSION_ALLOW_ALWAYS: "default",
    PERMISSION_REJECT_ONCE: "danger",
    PERMISSION_REJECT_ALWAYS: "danger",
}


NOT_PENDING = "This approval is no longer pending."
WRONG_CONVERSATION = "wrong conversation"  # the audit's reason for a press from elsewhere
WITHDRAWN = "Expired: Switchboard restarted before anyone answered."


@dataclass(slots=True)
class _Open:
    pending: PendingPermission
    requester: UserRef
    surface: str
    tokens: dict[str, PermissionOption]
    answered_by: str = ""  # the user id whose press was taken
    key: ConversationKey | None = None  # where it was asked (the operations view lists it)
    trust_token: str = ""  # the Trust button's ("": the card has none)
    presser: UserRef | None = None  # who pressed the button taken
    trusted: bool = False  # the press taken was the Trust button


class ApprovalBroker:
    def __init__(
        self,
        store: StateStore,
        access: AccessPolicy,
        *,
        timeout: float,
        audit: AuditLog | None = None,
        replica: str,
        diff_file_after: int = DIFF_FILE_AFTER,
    ) -> None:
        self.diff_file_after = diff_file_after  # an edit's lines past which its .diff is sent
        self.store = store
        self.access = access
        self.timeout = timeout
        self.audit = audit
        self.replica = replica  # kept with each token: whose cards are left after a crash
        self._open: dict[str, _Open] = {}  # group -> request
        self._group_of: dict[str, str] = {}  # token -> group
        self.trust = TrustBook()  # rules per conversation session, and the projects' policies

    async def ask(
        self,
        surface: Surface,
        key: ConversationKey,
        requester: UserRef,
        pending: PendingPermission,
    ) -> str | None:
        """Show the choice and wait for an allowed answer, a withdrawal or the timeout.
        Returns the option id to send (None = `cancelled`). A request of the agent's that the
        trust ladder covers is answered at once, without a card; Switchboard's own card for a
        command or write the agent did not ask about (`unasked`) is always shown, and offers no
        Trust button: trust is for what the agent asks."""
        request = pending.request
        automatic = None if pending.unasked else self.trust.automatic(key, request)
        if automatic is not None:
            return await self._automatically(surface.name, key, requester, pending, automatic)
        group = secrets.token_urlsafe(9)
        tokens = {secrets.token_urlsafe(12): option for option in request.options}
        records = [(token, option.option_id) for token, option in tokens.items()]
        trust_token = ""
        allow_once = request.option_of_kind(PERMISSION_ALLOW_ONCE)
        if allow_once is not None and not pending.unasked and trustable(request):
            trust_token = secrets.token_urlsafe(12)
            records.append((trust_token, allow_once.option_id))
        now = time.time()
        await self.store.put_approvals(
            [
                ApprovalRecord(token, group, option_id, requester.id, key, now, self.replica)
                for token, option_id in records
            ],
            self.timeout + 60,
        )
        opened = self._open[group] = _Open(
            pending, requester, surface.name, tokens, key=key, trust_token=trust_token
        )
        self._group_of.update(dict.fromkeys((token for token, _ in records), group))
        choices = [
            Choice(token, option.name, _STYLE.get(option.kind, "default"))
            for token, option in tokens.items()
        ]
        if trust_token:
            choices.append(Choice(trust_token, TRUST_LABEL, "default"))
        allowed = sorted({requester.id, *self.access.approvers(surface.name)})
        prompt = approval_prompt(request)
        outcome = "stopped"
        audited = "stopped"  # the turn ended before anyone answered
        made = ""  # the trust rule the press made, for the audit
        ref = None
        try:
            prompt = await card_with_patch(surface, key, request, prompt, self.diff_file_after)
            ref = await surface.ask_choice(key, prompt, choices, allowed_users=allowed)
            try:
                await self.store.approval_shown(group, ref.id)
            except StoreError as exc:  # only a crash from now on would leave the card open
                log.warning("could not note the approval card %s: %s", ref.id, exc.reason)
            with anyio.move_on_after(self.timeout):
                await pending.wait()
            if not pending.answered:
                reject = request.option_of_kind(PERMISSION_REJECT_ONCE, PERMISSION_REJECT_ALWAYS)
                pending.respond(reject.option_id if reject else None)
                outcome = f"No answer within {self.timeout:g} s: rejected."
                audited = "timed out, rejected"
            else:
                outcome = self._describe(pending, tokens)
                audited = self._audited(pending, tokens)
                rule = self._remember(key, opened)
                if rule is not None:
                    outcome = _allowed_from_now(rule)
                    made = f"trust rule {rule.number} ({rule.source}): {rule.describe()}"
            return await pending.wait()
        finally:
            self._forget(group)
            with anyio.CancelScope(shield=True):
                # The buttons go first: the agent has the answer already, and its reply should
                # not overtake the line saying what was chosen.
                if ref is not None:
                    try:
                        await surface.close_choice(ref, prompt, outcome)
                    except Exception:
                        log.warning("could not close the approval prompt", exc_info=True)
                await self.store.drop_approvals(group)
                if self.audit is not None:
                    await self.audit.record(
                        APPROVAL,
                        surface.name,
                        opened.answered_by,
                        "approval",
                        requester=requester.id,
                        tool=" ".join(
                            part for part in (request.tool.title, request.tool.kind) if part
                        ),
                        outcome=audited,
                        rule=made,
                    )

    def _remember(self, key: ConversationKey, opened: _Open) -> TrustRule | None:
        """The rule a press makes: the Trust button's, or an `allow_always` option's."""
        pending = opened.pending
        if pending.withdrawn or opened.presser is None:
            return None
        request = pending.request
        if opened.trusted:
            kind = PERMISSION_ALLOW_ONCE
        else:
            chosen = next((o for o in request.options if o.option_id == pending.answer_id), None)
            if chosen is None or chosen.kind != PERMISSION_ALLOW_ALWAYS:
                return None
            kind = PERMISSION_ALLOW_ALWAYS
        return self.trust.add(key, request.session_id, request.tool, kind, opened.presser)

    async def _automatically(
        self,
        surface: str,
        key: ConversationKey,
        requester: UserRef,
        pending: PendingPermission,
        automatic: Automatic,
    ) -> str | None:
        """Answer `pending` with the ladder's allow option, audited as a press is."""
        pending.automatic = True  # acp counts it as allowing this call, and nothing more
        pending.respond(automatic.option.option_id)
        tool = pending.request.tool
        answered = (automatic.answerer, automatic.option.kind, tool.describe())
        log.info("%s: %s answered %s for %s", key, *answered)
        if self.audit is not None:
            with anyio.CancelScope(shield=True):
                await self.audit.record(
                    APPROVAL,
                    surface,
                    automatic.answerer,
                    "approval",
                    requester=requester.id,
                    tool=" ".join(part for part in (tool.title, tool.kind) if part),
                    outcome=automatic.option.kind,
                    rule=automatic.reason,
                )
        return await pending.wait()

    @property
    def pending(self) -> int:
        """Approval requests waiting for an answer now."""
        return len(self._open)

    def waiting(self) -> list[tuple[ConversationKey | None, str, str]]:
        """The requests waiting now: (conversation, requester id, tool), for the operations view."""
        return [
            (opened.key, opened.requester.id, opened.pending.request.tool.title)
            for opened in self._open.values()
        ]

    @staticmethod
    def _describe(pending: PendingPermission, tokens: dict[str, PermissionOption]) -> str:
        if pending.withdrawn:
            return "The agent withdrew the request."
        names = {option.option_id: option.name for option in tokens.values()}
        return f"Answered: {names.get(pending.answer_id or '', 'stopped')}"

    @staticmethod
    def _audited(pending: PendingPermission, tokens: dict[str, PermissionOption]) -> str:
        """The outcome as the audit log keeps it: the option's kind (allow_once, ...)."""
        if pending.withdrawn:
            return "withdrawn"
        kinds = {option.option_id: option.kind for option in tokens.values()}
        return kinds.get(pending.answer_id or "", "") or "cancelled"

    def _forget(self, group: str) -> None:
        opened = self._open.pop(group, None)
        if opened is not None:
            for token in opened.tokens:
                self._group_of.pop(token, None)

    async def answer(self, answer: ChoiceAnswer) -> bool:
        """Apply a button press. Returns whether it was taken."""
        group = self._group_of.get(answer.token)
        opened = self._open.get(group) if group is not None else None
        shown_in = opened.key if opened is not None else await self._stored_home(answer.token)
        if opened is None or await self.refuse_misplaced(answer, shown_in, "approval"):
            await _notify(answer, NOT_PENDING)
            return False
        if not self.access.may_approve(opened.surface, answer.user, opened.requester.id):
            who = opened.requester.label
            await _notify(answer, f"Only {who} or an approver can answer this.")
            log.info("refused an approval answer from %s", answer.user.id)
            if self.audit is not None:
                await self.audit.refused(
                    opened.surface, answer.user.id, "approval", requester=opened.requester.id
                )
            return False
        record = await self.store.take_approval(answer.token)
        if record is None or opened.pending.answered:
            await _notify(answer, "This approval was already answered.")
            return False
        opened.answered_by = answer.user.id
        opened.presser = answer.user
        opened.trusted = bool(opened.trust_token) and answer.token == opened.trust_token
        opened.pending.respond(record.option_id)
        return True

    async def _stored_home(self, token: str) -> ConversationKey | None:
        """Where a token this replica does not hold was shown, if it is pending anywhere (a
        press routed here by the conversation it came from, the card being another's)."""
        try:
            pending = await self.store.approvals_pending()
        except StoreError as exc:
            log.warning("could not look up a pressed approval token: %s", exc.reason)
            return None
        return next((record.key for record in pending if record.token == token), None)

    async def refuse_misplaced(
        self, press: ChoiceAnswer, shown_in: ConversationKey | None, action: str
    ) -> bool:
        """The check every press of a choice token passes: True (refused, audited) when the
        press came from another conversation or surface than the one its card was shown in.
        The caller answers as it answers an unknown token: the presser learns nothing."""
        if shown_in is None or shown_in == press.key:
            return False
        log.warning(
            "refused a %s press from %s in %s: its card is in another conversation",
            action,
            press.user.id,
            press.key,
        )
        if self.audit is not None:
            await self.audit.refused(
                press.key.surface,
                press.user.id,
                action,
                reason=WRONG_CONVERSATION,
                chat=press.key.chat,
                thread=press.key.thread,
                card_surface=shown_in.surface,
                card_chat=shown_in.chat,
            )
        return True

    async def withdraw_left(
        self, surfaces: dict[str, Surface], left_by: Callable[[str], bool]
    ) -> None:
        """Cards of approvals a stopped process left pending (`left_by(replica)` says whose):
        their buttons go (the card says why) and their tokens with them; a later press of one
        is answered as any unknown token is. Cards of surfaces not running here stay for the
        replica that runs them."""
        try:
            pending = await self.store.approvals_pending()
        except StoreError as exc:
            log.warning("cannot read the approvals a stopped process left: %s", exc.reason)
            return
        cards = {r.group: r for r in pending if left_by(r.replica) and r.key.surface in surfaces}
        for group, record in cards.items():
            log.info("withdrawing the approval card %s left in %s", group, record.key)
            if record.message:
                ref = MessageRef(record.key, record.message)
                try:
                    await surfaces[record.key.surface].close_choice(ref, "", WITHDRAWN)
                except Exception:  # the surface: one card's fault must not stop the others
                    log.warning(
                        "could not withdraw the approval card in %s", record.key, exc_info=True
                    )
            try:
                await self.store.drop_approvals(group)
            except StoreError as exc:  # they expire by themselves
                log.warning("could not drop the approval tokens of %s: %s", group, exc.reason)


def _allowed_from_now(rule: TrustRule) -> str:
    """The card's closing line for a press that made a rule."""
    if rule.source == "trusted":
        return f"Trusted for this session: {rule.describe()} (trust rule {rule.number})."
    return f"Allowed always: {rule.describe()} in this session (trust rule {rule.number})."


async def audit_violation(
    audit: AuditLog, key: ConversationKey, requester: str, violation: AcpGateViolation
) -> None:
    """A tool the agent ran with nobody's approval (the turn was stopped): kept with the
    approvals, as the approval nobody was asked for."""
    await audit.record(
        APPROVAL,
        key.surface,
        "",
        "gate violation",
        requester=requester,
        agent=violation.agent,
        tool=violation.tool,
        chat=key.chat,
    )


async def _notify(answer: ChoiceAnswer, text: str) -> None:
    if answer.notify is not None:
        await answer.notify(text)
