"""The card of one of the agent's questions on show (bot/elicitation_broker.py asks them): posted
as a choice whose buttons carry one-time tokens kept in the store with the approvals' tokens, a
prompt for a typed answer (`surfaces.abilities.AsksForText` where the surface has it, else the
card or a message), closed with what happened; and what arrives for it, waited for until the
timeout, the request's answer from elsewhere (a stopped turn, withdrawn by the agent) or, for a
URL question, the agent saying it is complete.

A card whose link button the platform refuses (a `SendFailed` that is not transient, for a card
with a link: Telegram answers BUTTON_URL_INVALID for localhost, a bare IP or an internal host) is
posted again without the link button and with the url in its text, plain, so the question is
still asked and the person can copy the link; any surface, decided here rather than in each
adapter."""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from acp import ElicitationField, PendingElicitation
from bot.access import AccessPolicy
from bot.elicitation_form import Card
from bot.store import ApprovalRecord, StateStore, StoreError
from surfaces.abilities import AsksForText, WithdrawsTextAsk
from surfaces.base import Choice, ConversationKey, MessageRef, Surface, UserRef
from surfaces.errors import SendFailed

__all__ = ["ELICIT_TOKEN_PREFIX", "Input", "OpenQuestion", "QuestionCards", "Say"]

log = logging.getLogger(__name__)

ELICIT_TOKEN_PREFIX = "elicit:"  # a question's button tokens (approval tokens have no prefix)
LINK_AS_TEXT = "The link: "  # before the url, on a card whose link button the platform refused

Say = Callable[[Surface, ConversationKey, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Input:
    """A press (its button's `value`) or a typed reply (`text`) from someone allowed to answer."""

    user: UserRef
    value: str = ""
    text: str | None = None
    files: bool = False


@dataclass(slots=True)
class OpenQuestion:
    """One question being asked: its card on show and what arrived for it."""

    pending: PendingElicitation
    surface: Surface
    key: ConversationKey
    requester: UserRef
    inbox: deque[Input] = field(default_factory=deque)
    arrived: anyio.Event = field(default_factory=anyio.Event)
    wants_text: bool = False  # the card on show is answered by the next message
    tokens: tuple[str, ...] = ()  # the buttons of the card on show
    group: str = ""
    card: MessageRef | None = None
    card_text: str = ""
    answered_by: str = ""  # the user id of the last answer taken

    def put(self, item: Input) -> None:
        self.inbox.append(item)
        self.arrived.set()

    async def next(self) -> Input:
        while not self.inbox:
            self.arrived = anyio.Event()
            await self.arrived.wait()
        return self.inbox.popleft()


class QuestionCards:
    """Shows, closes and waits on the cards of the app's open questions; `holder` finds the
    question whose card on show offers a token."""

    def __init__(
        self,
        store: StateStore,
        access: AccessPolicy,
        *,
        timeout: float,
        replica: str,
        say: Say,
    ) -> None:
        self.store = store
        self.access = access
        self.timeout = timeout
        self.replica = replica
        self._say = say
        self.holder: dict[str, OpenQuestion] = {}  # token -> the question whose card offers it

    async def show(self, form: OpenQuestion, card: Card, link: Choice | None = None) -> None:
        """Post `card` (with `link` first) as a choice whose buttons carry one-time tokens."""
        if not card.offers:
            return
        group = secrets.token_urlsafe(9)
        offers = {f"{ELICIT_TOKEN_PREFIX}{secrets.token_urlsafe(12)}": o for o in card.offers}
        now = time.time()
        requester = form.requester.id
        await self.store.put_approvals(
            [
                ApprovalRecord(token, group, offer.value, requester, form.key, now, self.replica)
                for token, offer in offers.items()
            ],
            self.timeout + 60,
        )
        form.group, form.tokens, form.card_text = group, tuple(offers), card.text
        self.holder.update(dict.fromkeys(offers, form))
        choices = [Choice(token, o.label, o.style) for token, o in offers.items()]
        allowed = sorted({requester, *self.access.approvers(form.surface.name)})
        try:
            form.card = await form.surface.ask_choice(
                form.key, card.text, [*([link] if link else []), *choices], allowed_users=allowed
            )
        except SendFailed as exc:
            if link is None or exc.transient:
                raise
            # The platform refused the card, most likely its link (Telegram will not link
            # localhost, a bare IP or an internal host): the card goes without it, the link in
            # its text for the person to copy.
            log.info("%s refused a question's card with a link; shown as text", form.key)
            form.card_text = f"{card.text}\n{LINK_AS_TEXT}{link.url}"
            form.card = await form.surface.ask_choice(
                form.key, form.card_text, choices, allowed_users=allowed
            )
        try:
            await self.store.approval_shown(group, form.card.id)
        except StoreError as exc:  # only a crash from now on would leave the card open
            log.warning("could not note the question's card %s: %s", form.card.id, exc.reason)

    async def ask_text(
        self, form: OpenQuestion, card: Card, field_: ElicitationField | None
    ) -> None:
        """The field is answered by the next message: where the card has buttons, a short
        prompt the person replies to (Telegram's force-reply); else the card's text itself."""
        form.wants_text = True
        if form.card is not None:
            if isinstance(form.surface, AsksForText) and field_ is not None:
                title = field_.title or field_.name
                prompt = f"{form.requester.label}, your answer to “{title}”:"
                await form.surface.ask_text(form.key, prompt, user=form.requester)
            return
        await self.retell(form, card.text)

    def stop_text(self, form: OpenQuestion) -> None:
        """The card on show is done with: a surface that awaits the person's next message
        (Slack, Discord; asked for the answer or told by `retell`) forgets it, so a later plain
        message stays theirs."""
        if isinstance(form.surface, WithdrawsTextAsk):
            form.surface.withdraw_text_ask(form.key, user=form.requester)
        form.wants_text = False

    async def retell(self, form: OpenQuestion, text: str) -> None:
        """A line for the person answering, as the next message's prompt where the surface
        has one (a terminal shows it at once, mid-reply)."""
        if isinstance(form.surface, AsksForText):
            await form.surface.ask_text(form.key, text, user=form.requester)
        else:
            await self._say(form.surface, form.key, text)

    async def say_safely(self, form: OpenQuestion, text: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._say(form.surface, form.key, text)
            except Exception:
                log.warning("could not tell %s about the question", form.key, exc_info=True)

    async def close(self, form: OpenQuestion, outcome: str) -> None:
        """The card on show loses its buttons and says `outcome`; its tokens go."""
        ref, group, tokens = form.card, form.group, form.tokens
        form.card, form.group, form.tokens = None, "", ()
        for token in tokens:
            self.holder.pop(token, None)
        if ref is not None:
            try:
                await form.surface.close_choice(ref, form.card_text, outcome or "Stopped.")
            except Exception:  # the surface: one card's fault must not keep the answer back
                log.warning("could not close the question's card", exc_info=True)
        if group:
            try:
                await self.store.drop_approvals(group)
            except StoreError as exc:  # they expire by themselves
                log.warning("could not drop the question's tokens: %s", exc.reason)

    async def next(self, form: OpenQuestion, *, completion: bool = False) -> Input | None:
        """What arrives for the card next; None when the time ran out, the request was
        answered elsewhere (a stopped turn, withdrawn), or (`completion`) the agent said the
        URL question is complete."""
        got: Input | None = None
        with anyio.move_on_after(self.timeout):
            async with anyio.create_task_group() as tg:

                async def ended(wait: Callable[[], Awaitable[object]]) -> None:
                    await wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(ended, form.pending.wait)
                if completion:
                    tg.start_soon(ended, form.pending.completed.wait)
                got = await form.next()
                tg.cancel_scope.cancel()
        return got
