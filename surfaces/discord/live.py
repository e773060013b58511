"""Discord's live reply (`surfaces.base.LiveReply`): the kit's one message per part, sent and then
edited (`surfaces.live.EditedLive`, whose records are the one place that says what each message
shows), with each call passing the chat's pacer once and then spending the global budget by the
rules of `spending.py`: new messages first, then final edits, live edits only with a slot free (a
declined one is a RateLimited already recorded: the bot folds its text into the next `show`)."""

from __future__ import annotations

from surfaces.base import Choice, ConversationKey, MessageRef, Surface
from surfaces.discord.messages import Messages, content_of
from surfaces.live import EditedLive

__all__ = ["DiscordLive"]


class DiscordLive(EditedLive):
    def __init__(self, surface: Surface, key: ConversationKey, messages: Messages) -> None:
        super().__init__(surface, key)
        self._calls = messages

    async def _send(
        self, text: str, *, final: bool, buttons: tuple[Choice, ...], optional: bool
    ) -> MessageRef:
        async with self._pacer.call(optional=optional):
            return await self._calls.send(self._key, text, final=final, buttons=buttons)

    async def _edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        final: bool,
        buttons: tuple[Choice, ...],
        optional: bool,
    ) -> None:
        # A live message always gets its final call; while the budget is busy it is skipped
        # when Discord would show the same content and buttons again.
        before = next((shown for shown in self._messages if shown.ref == ref), None)
        unchanged = (
            before is not None
            and before.buttons == buttons
            and content_of(before.text, before.final) == content_of(text, final)
        )
        async with self._pacer.call(optional=optional):
            await self._calls.edit(ref, text, final=final, buttons=buttons, unchanged=unchanged)
