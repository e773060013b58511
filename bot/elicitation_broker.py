"""The agent's questions (ACP `elicitation/create`): a form asked field by field on the surface, or
a link to open, and the answer that goes back (`accept` with the values, `decline`, `cancel`).

The cards and how a reply is read are bot/elicitation_form.py's, the card on show and the wait
for what arrives bot/elicitation_cards.py's; this module walks the question and answers it. Only
the person whose message started the turn, or an approver (admins are approvers), answers: a
press from anyone else is refused and told, and audited as an approval press is. Buttons carry
one-time tokens (`ELICIT_TOKEN_PREFIX` and a random part) kept in the store with the approvals'
tokens (so cards a crashed process left are closed at start-up by
`ApprovalBroker.withdraw_left`); a press from another conversation is refused through
`ApprovalBroker.refuse_misplaced`. A field answered by typing takes the person's next message in
the conversation (`take_text`, which the intake asks before it queues a message as a prompt).

Nobody answering a card within `SWITCHBOARD_APPROVAL_TIMEOUT` answers `cancel`; so does a value
that is still not valid after `MAX_TRIES` replies. A turn stopped (`/stop`) or a request the
agent withdrew answers the request in acp (`cancel`, as ACP asks of a cancelled turn); here the
open card is closed saying so. A URL question is answered `accept` when the person presses Done,
or when the agent says it is complete (`elicitation/complete`) first; that message closes the
card. Every question's end is audited (who, the question's message, the action: never a value
typed or picked)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio

from acp import (
    ELICITATION_ACCEPT,
    ELICITATION_CANCEL,
    ELICITATION_DECLINE,
    ElicitationAnswer,
    ElicitationField,
    ElicitationInvalid,
    PendingElicitation,
)
from bot.access import AccessPolicy
from bot.audit import AuditLog
from bot.elicitation_cards import ELICIT_TOKEN_PREFIX, Input, OpenQuestion, QuestionCards, Say
from bot.elicitation_form import (
    CANCEL,
    DECLINE,
    MAX_TRIES,
    OK,
    OTHER,
    SKIP,
    VALUE_PREFIX,
    Card,
    button_value,
    companion,
    field_card,
    typed_action,
    url_card,
    url_host,
)
from bot.permissions import ApprovalBroker
from bot.store import StateStore, StoreError
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    MessageRef,
    Surface,
    UserRef,
)

__all__ = ["ELICIT_TOKEN_PREFIX", "ElicitationBroker"]

log = logging.getLogger(__name__)

NOT_OPEN = "This question is no longer open."
FILES_REFUSED = "Type the answer: a file cannot answer the agent's question."

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]

# The audit's outcomes (besides the three ACP actions)
TIMED_OUT = "timed out, cancelled"
NOT_VALID = "no valid value, cancelled"
WITHDRAWN = "withdrawn"
STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class _Step:
    """How one card ended: a value (`action` empty), or an action that ends the question."""

    action: str = ""
    value: Any = None


class ElicitationBroker:
    """The app's open questions, by conversation and by token (see the module's doc)."""

    def __init__(
        self,
        store: StateStore,
        access: AccessPolicy,
        approvals: ApprovalBroker,
        *,
        timeout: float,
        audit: AuditLog,
        replica: str,
        say: Say,
        spawn: Spawn,
    ) -> None:
        self.store = store
        self.access = access
        self.approvals = approvals
        self.timeout = timeout
        self.audit = audit
        self._spawn = spawn
        self._forms: dict[ConversationKey, OpenQuestion] = {}
        self.cards = QuestionCards(store, access, timeout=timeout, replica=replica, say=say)

    # ---- asking ---------------------------------------------------------------------------

    async def ask(
        self,
        surface: Surface,
        key: ConversationKey,
        requester: UserRef,
        pending: PendingElicitation,
    ) -> ElicitationAnswer:
        """Ask the question on the surface and return the answer for the agent (the caller
        sends it). Returns `cancel` when the request was answered meanwhile (a stopped turn,
        withdrawn by the agent)."""
        form = OpenQuestion(pending, surface, key, requester)
        self._forms[key] = form
        request = pending.request
        outcome = STOPPED
        answer = ElicitationAnswer(ELICITATION_CANCEL, {})
        try:
            if request.mode == "url":
                answer, outcome = await self._ask_url(form)
            else:
                answer, outcome = await self._ask_form(form)
            return answer
        finally:
            if self._forms.get(key) is form:
                del self._forms[key]
            with anyio.CancelScope(shield=True):
                await self.cards.close(form, "Stopped." if outcome == STOPPED else "")
                await self.audit.elicitation(
                    surface.name,
                    requester=requester.id,
                    answerer=form.answered_by,
                    question=request.message,
                    mode=request.mode,
                    outcome=outcome,
                )

    async def _ask_form(self, form: OpenQuestion) -> tuple[ElicitationAnswer, str]:
        request = form.pending.request
        content: dict[str, Any] = {}
        buttons = form.surface.capabilities.message_buttons
        index = 0
        while index < max(1, len(request.fields)):
            field_ = request.fields[index] if request.fields else None
            card = field_card(request, index, self._asked(form), buttons=buttons)
            step = await self._card(form, card, field_)
            # a choice's companion (elicitation_form.py) is asked only when "Other…" was pressed
            index += 1 if step.action == OTHER or not companion(request.fields, index + 1) else 2
            if step.action in (SKIP, OTHER) or (step.action == OK and field_ is None):
                continue
            if step.action:
                return self._ending(form, step.action)
            assert field_ is not None
            content[field_.name] = step.value
        return ElicitationAnswer(ELICITATION_ACCEPT, content), ELICITATION_ACCEPT

    def _ending(self, form: OpenQuestion, action: str) -> tuple[ElicitationAnswer, str]:
        """The answer for a question ended by `action` (the person's, or why it ended)."""
        if action == DECLINE:
            return ElicitationAnswer(ELICITATION_DECLINE, {}), ELICITATION_DECLINE
        if action == CANCEL:
            return ElicitationAnswer(ELICITATION_CANCEL, {}), ELICITATION_CANCEL
        if action == STOPPED and form.pending.withdrawn:
            action = WITHDRAWN
        return ElicitationAnswer(ELICITATION_CANCEL, {}), action

    def _asked(self, form: OpenQuestion) -> str:
        approvers = self.access.approvers(form.surface.name)
        others = [who for who in approvers if who != form.requester.id]
        return form.requester.label + (" (or an approver)" if others else "")

    async def _card(self, form: OpenQuestion, card: Card, field_: ElicitationField | None) -> _Step:
        """Show one card and take what arrives for it until it has a value or an ending."""
        await self.cards.show(form, card)
        if card.wants_text:
            await self.cards.ask_text(form, card, field_)
        tries = 0
        outcome = "Stopped."  # unless the card ends otherwise (the turn was cancelled)
        told = False  # an end the person did not choose: said where no card shows it
        try:
            while True:
                got = await self.cards.next(form)
                if got is None:
                    if form.pending.answered:
                        gone = form.pending.withdrawn
                        outcome = "The agent withdrew the question." if gone else "Stopped."
                        return _Step(STOPPED)
                    outcome, told = f"No answer within {self.timeout:g} s: cancelled.", True
                    return _Step(TIMED_OUT)
                who = got.user.label
                form.answered_by = got.user.id
                action = got.value if got.text is None else typed_action(got.text)
                if action == SKIP and field_ is not None and field_.required:
                    title = field_.title or field_.name
                    await self.cards.retell(form, f"{title} is required: answer it, or decline.")
                    continue
                if action in (SKIP, DECLINE, CANCEL, OK, OTHER):
                    outcome = {
                        SKIP: "Skipped",
                        DECLINE: "Declined",
                        CANCEL: "Cancelled",
                        OK: "Sent",
                        OTHER: f"{self._label(card, OTHER)} chosen",
                    }[action] + f" by {who}."
                    return _Step(action)
                if got.text is None and got.value.startswith(VALUE_PREFIX):
                    value = button_value(field_, got.value)
                    outcome = f"Answered by {who}: {self._label(card, got.value)}"
                    return _Step(value=value)
                if got.text is None or field_ is None:
                    continue  # a press of another card's kind: not this card's
                if got.files and not got.text.strip():
                    await self.cards.retell(form, FILES_REFUSED)
                    continue
                try:
                    value = field_.read(got.text)
                except ElicitationInvalid as exc:
                    tries += 1
                    if tries >= MAX_TRIES:
                        outcome = f"No valid answer after {MAX_TRIES} tries: cancelled."
                        told = True
                        return _Step(NOT_VALID)
                    await self.cards.retell(form, f"{exc} Reply again.")
                    continue
                outcome = f"Answered by {who}."
                return _Step(value=value)
        finally:
            self.cards.stop_text(form)
            had_card = form.card is not None
            with anyio.CancelScope(shield=True):
                await self.cards.close(form, outcome)
            if told and not had_card:  # no card says why the question ended (a terminal)
                await self.cards.say_safely(form, outcome)

    @staticmethod
    def _label(card: Card, value: str) -> str:
        return next((offer.label for offer in card.offers if offer.value == value), "")

    async def _ask_url(self, form: OpenQuestion) -> tuple[ElicitationAnswer, str]:
        request = form.pending.request
        card = url_card(request, self._asked(form))
        host = url_host(request.url)
        link = Choice(f"{ELICIT_TOKEN_PREFIX}link", f"Open {host}", url=request.url)
        await self.cards.show(form, card, link)
        got = await self.cards.next(form, completion=True)
        if got is None and form.pending.is_complete and not form.pending.answered:
            await self.cards.close(form, "Done: the agent says it is complete.")
            return ElicitationAnswer(ELICITATION_ACCEPT, {}), ELICITATION_ACCEPT
        if got is None:
            step = _Step(STOPPED if form.pending.answered else TIMED_OUT)
            ended = "Stopped." if step.action == STOPPED else ""
            if step.action == TIMED_OUT:
                ended = f"No answer within {self.timeout:g} s: cancelled."
            await self.cards.close(form, ended)
            return self._ending(form, step.action)
        form.answered_by = got.user.id
        action = got.value if got.text is None else typed_action(got.text) or ""
        if action != OK:
            words = {DECLINE: "Declined", CANCEL: "Cancelled"}
            await self.cards.close(form, f"{words.get(action, 'Cancelled')} by {got.user.label}.")
            return self._ending(form, action if action in words else CANCEL)
        if form.pending.is_complete:
            await self.cards.close(form, f"Done ({got.user.label}); the agent says it is complete.")
        else:
            ref, text = form.card, form.card_text
            await self.cards.close(
                form, f"Done ({got.user.label}); waiting for the agent to confirm."
            )
            if ref is not None:
                self._spawn(lambda: self._close_when_complete(form, ref, text))
        return ElicitationAnswer(ELICITATION_ACCEPT, {}), ELICITATION_ACCEPT

    async def _close_when_complete(self, form: OpenQuestion, ref: MessageRef, text: str) -> None:
        """`elicitation/complete` after the person pressed Done: the card says so."""
        with anyio.move_on_after(self.timeout):
            await form.pending.completed.wait()
            try:
                await form.surface.close_choice(ref, text, "Done: the agent says it is complete.")
            except Exception:  # the surface: the question is answered whatever the card shows
                log.warning("could not close the question's card", exc_info=True)

    # ---- what arrives ---------------------------------------------------------------------

    def decline_open(self, key: ConversationKey) -> None:
        """/stop (and an interrupt) ends the turn: the open question in `key` is answered
        `decline` before the turn is cancelled, so the agent hears that the person chose not to
        answer (its card closes as "Stopped." when the answer is in)."""
        form = self._forms.get(key)
        if form is not None and not form.pending.answered:
            form.pending.respond(ElicitationAnswer(ELICITATION_DECLINE, {}))

    async def take_text(self, message: Inbound) -> bool:
        """The message answers the question waiting in its conversation for typed text (True),
        when it comes from someone who may answer it; else it is an ordinary message."""
        form = self._forms.get(message.key)
        if form is None or not form.wants_text:
            return False
        if not self.access.may_approve(message.key.surface, message.user, form.requester.id):
            return False
        form.put(Input(message.user, text=message.text, files=bool(message.files)))
        return True

    async def answer(self, press: ChoiceAnswer) -> bool:
        """A press of a question's button. Returns whether it was taken."""
        form = self.cards.holder.get(press.token)
        shown_in = form.key if form is not None else await self._stored_home(press.token)
        if form is None or await self.approvals.refuse_misplaced(press, shown_in, "question"):
            await _notify(press, NOT_OPEN)
            return False
        if not self.access.may_approve(form.surface.name, press.user, form.requester.id):
            await _notify(press, f"Only {form.requester.label} or an approver can answer this.")
            log.info("refused a question's answer from %s", press.user.id)
            await self.audit.refused(
                form.surface.name, press.user.id, "question", requester=form.requester.id
            )
            return False
        record = await self.store.take_approval(press.token)
        if record is None or press.token not in form.tokens:
            await _notify(press, "This question was already answered.")
            return False
        form.put(Input(press.user, value=record.option_id))
        return True

    async def _stored_home(self, token: str) -> ConversationKey | None:
        """Where a token this replica does not hold was shown, if it is pending anywhere."""
        try:
            pending = await self.store.approvals_pending()
        except StoreError as exc:
            log.warning("could not look up a pressed question token: %s", exc.reason)
            return None
        return next((record.key for record in pending if record.token == token), None)

    @property
    def pending(self) -> int:
        """Questions waiting for an answer now."""
        return len(self._forms)


async def _notify(answer: ChoiceAnswer, text: str) -> None:
    if answer.notify is not None:
        await answer.notify(text)
