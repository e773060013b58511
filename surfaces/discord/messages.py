"""The bot's messages on Discord: posted and edited in the conversation's channel (or as the
answer to a slash command, `interactions.py`), each call spending the global budget by the rules
of `spending.py`, then made shielded from cancellation and bounded (`surfaces.live.one_call`), so
that whoever asked knows what the message shows after a cancelled turn. Used by the surface's
`send` / `edit` and by its live reply (`live.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from surfaces.base import Choice, ConversationKey, MessageRef
from surfaces.discord.convert import fit, plain
from surfaces.discord.errors import EDITS, REST
from surfaces.discord.gateway import NO_MENTIONS
from surfaces.discord.interactions import Interactions, current_followup
from surfaces.discord.interactions import buttons as button_row
from surfaces.discord.sdk import discord
from surfaces.discord.spending import Spending
from surfaces.live import did_not_answer, one_call

__all__ = ["Messages", "content_of"]

T = TypeVar("T")


def content_of(text: str, final: bool) -> str:
    """What a message shows: `final` text is `render()` output, anything else plain text."""
    return fit(text if final else plain(text))


class Messages:
    """Posts and edits through `channel_of(key)`, the conversation's channel."""

    def __init__(
        self,
        spending: Spending,
        interactions: Interactions,
        channel_of: Callable[[ConversationKey], discord.PartialMessageable],
    ) -> None:
        self._spending = spending
        self._interactions = interactions
        self._channel_of = channel_of

    async def send(
        self, key: ConversationKey, text: str, *, final: bool, buttons: Sequence[Choice] = ()
    ) -> MessageRef:
        content = content_of(text, final)
        view = button_row(buttons)
        followup = current_followup(key)
        if followup is not None:
            ref = await _once(self._interactions.send(followup, content, view))
            if ref is not None:
                return ref
        channel = self._channel_of(key)
        await self._spending.new_message(channel.id, final=final)
        message = await _once(
            REST.call(
                channel.send(
                    content, view=view or discord.utils.MISSING, allowed_mentions=NO_MENTIONS
                )
            )
        )
        self._spending.sent(channel.id, final=final)
        return MessageRef(key, str(message.id))

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        final: bool,
        buttons: Sequence[Choice] = (),
        unchanged: bool = False,
    ) -> None:
        """The message's text and its buttons; with none, its components go (`view=None`).
        `unchanged`: a final edit that shows what the message shows already (made only when the
        budget has a slot free)."""
        content = content_of(text, final)
        view = button_row(buttons)
        message_id = int(ref.id)
        if await _once(self._interactions.edit(message_id, content, view)):
            return
        message = self._channel_of(ref.key).get_partial_message(message_id)
        # Live edits (not `final`) may be declined with a RateLimited while the budget is busy.
        if await self._spending.edit(content, final=final, unchanged=unchanged):
            await _once(
                EDITS.call(message.edit(content=content, view=view, allowed_mentions=NO_MENTIONS))
            )


async def _once(call: Awaitable[T]) -> T:
    """One platform call, shielded and bounded; one that did not answer in time is a transient
    SendFailed."""
    done = False
    with one_call() as scope:
        result = await call
        done = True
    if scope.cancelled_caught or not done:
        raise did_not_answer()
    return result
