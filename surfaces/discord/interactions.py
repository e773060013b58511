"""Discord interactions: slash commands deferred at once and answered by followups, approval
buttons and their presses, and notices only the person who pressed sees.

Discord wants every interaction acknowledged within 3 seconds, or it refuses the token. A slash
command is acknowledged at once with a deferred ("thinking…") response, ephemeral for /status,
/help and /model. The command then reaches the bot as text (`/model ID`) and the bot's answer
must become that interaction's followup. The surface API has no "reply to this event" argument,
so the adapter hands the event to the bot inside `answering(followup)`, a context variable naming
the deferred interaction: whatever the bot sends for that conversation from the resulting work
(the command's answer, a "queued" receipt, or the turn a /compact starts, since tasks inherit the
context they are started from) goes out as the followup (`current_followup`); the first such send
takes it, later ones go to the channel. Edits of a followup go through the interaction's webhook.
A followup that cannot be sent (the token expired after 15 minutes) falls back to an ordinary
message.

A press on an approval's buttons by someone the choice names is acknowledged silently (the bot's
outcome edits the message); anyone else's gets an ephemeral "thinking…" that a notice replaces:
the bot's refusal text, or ours if it says nothing (`take_press`). The buttons' custom ids are
the bot's one-time tokens, and discord.py's view store is not used (the view is stopped before
sending): every press arrives in `on_interaction`, also after a restart.

discord.py makes interaction responses and followups through a webhook adapter it keeps in a
context variable; pointed at another API (tests), `webhook_calls` sets a rebased one around each
of this surface's calls."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio

from surfaces.base import Choice, ConversationKey, MessageRef
from surfaces.bounded import BoundedMap
from surfaces.discord.convert import MAX_BUTTONS, MAX_URL, button_label, fit, plain
from surfaces.discord.errors import EDITS, NETWORK_ERRORS, SDK_FAILURES, unreachable
from surfaces.discord.gateway import NO_MENTIONS, rebase
from surfaces.discord.sdk import AsyncWebhookAdapter, Route, async_context, discord
from surfaces.links import renderable

__all__ = [
    "ACK_DEADLINE",
    "Followup",
    "Interactions",
    "Notify",
    "answering",
    "buttons",
    "current_followup",
]

log = logging.getLogger(__name__)

ACK_DEADLINE = 2.5  # Discord's is 3 s; past it the interaction token is refused
FOLLOWUP_TTL = 14 * 60.0  # interaction tokens last 15 minutes
# Sent followups remembered for their edits; expired ones are forgotten first, and this cap
# (far above what 14 minutes bring) only keeps a flood from growing the map without end.
FOLLOWUPS_REMEMBERED = 10_000
NOT_HERE = "Switchboard does not answer in this channel; use a DM or a channel it serves."
NOT_YOURS = "This choice is not yours to answer."
_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "danger": discord.ButtonStyle.danger,
    "default": discord.ButtonStyle.secondary,
}

Notify = Callable[[str], Awaitable[None]]


@dataclass(eq=False)
class Followup:
    """A slash command acknowledged with "thinking…", waiting for the bot's answer."""

    interaction: discord.Interaction[Any]
    key: ConversationKey
    ephemeral: bool
    created: float = field(default_factory=time.monotonic)
    used: bool = False

    def fresh(self) -> bool:
        return time.monotonic() - self.created < FOLLOWUP_TTL

    def takes(self, key: ConversationKey) -> bool:
        return not self.used and self.key == key and self.fresh()


# The deferred interaction whose answer the current work produces (see the module docstring).
_CURRENT: contextvars.ContextVar[Followup | None] = contextvars.ContextVar(
    "switchboard_discord_followup", default=None
)


@contextlib.contextmanager
def answering(followup: Followup | None) -> Iterator[None]:
    """The work in the body (and the tasks it starts) answers `followup`."""
    token = _CURRENT.set(followup)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_followup(key: ConversationKey) -> Followup | None:
    """The followup the current work may still answer in `key`, if any."""
    followup = _CURRENT.get()
    return followup if followup is not None and followup.takes(key) else None


def buttons(choices: Sequence[Choice]) -> discord.ui.View | None:
    """A choice's options as buttons (the first `MAX_BUTTONS`) whose custom ids are its tokens;
    a link choice as a link-style button (style 5: a url, no custom id, never an interaction).
    None when there is none to show."""
    shown = renderable(choices, surface="discord", max_url=MAX_URL)
    if not shown:
        return None
    view = discord.ui.View(timeout=None)
    if len(shown) > MAX_BUTTONS:
        log.warning("showing %d of %d options as buttons", MAX_BUTTONS, len(shown))
    for choice in shown[:MAX_BUTTONS]:
        label = button_label(choice.label)
        if choice.url:
            view.add_item(discord.ui.Button(label=label, url=choice.url))
            continue
        style = _STYLES.get(choice.style, discord.ButtonStyle.secondary)
        view.add_item(discord.ui.Button(label=label, custom_id=choice.token, style=style))
    view.stop()  # presses come to on_interaction, not to discord.py's view store
    return view


class _RebasedWebhooks(AsyncWebhookAdapter):
    """discord.py's webhook adapter (interaction callbacks, followups) against another base."""

    def __init__(self, base: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._base = base

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        route.url = rebase(route.url, self._base)
        return await super().request(route, session, **kwargs)


class Interactions:
    """This surface's interaction calls, and the followups it sent (for their edits)."""

    def __init__(self, api_base: str) -> None:
        self._webhooks = _RebasedWebhooks(api_base) if api_base else None
        self._sent: BoundedMap[int, Followup] = BoundedMap(FOLLOWUPS_REMEMBERED)

    # ---- acknowledging -------------------------------------------------------------------------
    async def defer_command(self, followup: Followup, name: str) -> None:
        """Show "thinking…" for the slash command `/name`; when that fails, the answer goes to
        the channel instead."""
        try:
            with anyio.move_on_after(ACK_DEADLINE) as scope, self.webhook_calls():
                await followup.interaction.response.defer(
                    ephemeral=followup.ephemeral, thinking=True
                )
            if scope.cancelled_caught:
                raise TimeoutError("no answer to the acknowledgement")
        except SDK_FAILURES as exc:
            log.warning("could not acknowledge /%s: %s; answering in the channel", name, exc)
            followup.used = True

    async def take_press(
        self,
        interaction: discord.Interaction[Any],
        answer: Callable[[Notify], Awaitable[None]],
        *,
        theirs: bool,
    ) -> None:
        """Acknowledge a press, then `answer(notify)` (the bot takes it; `notify` tells the
        person who pressed, privately). A press that is not `theirs` is told something."""
        told = False

        async def notify(text: str) -> None:
            nonlocal told
            told = True
            await self.tell(interaction, text)

        try:
            # Someone the choice names: acknowledged silently, the outcome edits the message.
            # Anyone else: an ephemeral "thinking…" that the notice below replaces.
            with anyio.move_on_after(ACK_DEADLINE), self.webhook_calls():
                await interaction.response.defer(ephemeral=True, thinking=not theirs)
        except SDK_FAILURES as exc:
            log.warning("could not acknowledge a button press: %s", exc)
        await answer(notify)
        if not theirs and not told:
            await notify(NOT_YOURS)

    async def tell(self, interaction: discord.Interaction[Any], text: str) -> None:
        """A notice about a button press that only the person who pressed sees."""
        try:
            with self.webhook_calls():
                await interaction.followup.send(
                    fit(plain(text)), ephemeral=True, allowed_mentions=NO_MENTIONS
                )
        except SDK_FAILURES as exc:
            who = interaction.user.id if interaction.user is not None else "?"
            log.warning("could not tell %s about their button press: %s", who, exc)

    async def say_not_here(self, interaction: discord.Interaction[Any]) -> None:
        """Answer a command where the bot does not serve with a reason only its sender sees."""
        try:
            with anyio.move_on_after(ACK_DEADLINE), self.webhook_calls():
                await interaction.response.send_message(
                    NOT_HERE, ephemeral=True, allowed_mentions=NO_MENTIONS
                )
        except SDK_FAILURES as exc:
            log.warning("could not answer a command in a place the bot does not serve: %s", exc)

    # ---- followups -----------------------------------------------------------------------------
    async def send(
        self, followup: Followup, content: str, view: discord.ui.View | None = None
    ) -> MessageRef | None:
        """Post `content` (with `view`'s buttons) as the followup, which it uses up; None when
        Discord refuses it (the token expired), for the caller to post in the channel instead."""
        followup.used = True
        try:
            with self.webhook_calls():
                message = await followup.interaction.followup.send(
                    content,
                    ephemeral=followup.ephemeral,
                    allowed_mentions=NO_MENTIONS,
                    wait=True,
                    view=view if view is not None else discord.utils.MISSING,
                )
        except discord.HTTPException as exc:  # the token expired or was refused
            log.warning("could not answer the slash command (%s); answering in the channel", exc)
            return None
        except NETWORK_ERRORS as exc:
            raise unreachable(exc) from exc
        self._sent.remember(message.id, followup)
        while self._sent:  # forget followups whose tokens have expired
            oldest = next(iter(self._sent.values()))
            if oldest.fresh():
                break
            self._sent.popitem(last=False)
        return MessageRef(followup.key, str(message.id))

    async def edit(
        self, message_id: int, content: str, view: discord.ui.View | None = None
    ) -> bool:
        """Edit a followup this surface sent (its buttons become `view`'s, or none), through
        its interaction's webhook. False: the message is no followup whose token still works
        (edit it in the channel)."""
        followup = self._sent.get(message_id)
        if followup is None or not followup.fresh():
            return False
        with self.webhook_calls(), EDITS.translated():
            await followup.interaction.followup.edit_message(
                message_id, content=content, view=view, allowed_mentions=NO_MENTIONS
            )
        return True

    # ---- helpers -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def webhook_calls(self) -> Iterator[None]:
        """Around interaction responses and followups: discord.py takes the webhook adapter
        from a context variable."""
        if self._webhooks is None:
            yield
            return
        token = async_context.set(self._webhooks)
        try:
            yield
        finally:
            async_context.reset(token)
