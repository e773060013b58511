"""Telegram's live reply (`surfaces.base.LiveReply`), one design for both kinds of chat.

In a private chat the reply being written shows in a draft bubble (`sendMessageDraft`: the part
being written, plain, with the status block), and `finish` sends the parts as messages (Telegram
drops the bubble when the bot sends). In groups, and in private chats where drafts are refused,
it is the kit's reply (`surfaces.live.EditedLive`): one message per part, sent, then edited, the
final edit rendered; its live calls are optional ones, so a group's window (20 messages a
minute, `group_preview_interval` apart) holds them back and keeps room for the final. Every call
goes through `MessageCalls`, which passes the chat's pacer once."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

from telegram import InlineKeyboardMarkup

from surfaces.base import Choice, ConversationKey, LivePart, MessageRef, Surface
from surfaces.live import EditedLive, laid_out
from surfaces.telegram.convert import chat_and_thread, is_private
from surfaces.telegram.errors import Rejected
from surfaces.telegram.messages import MessageCalls

__all__ = ["DraftChats", "TelegramLive"]

log = logging.getLogger(__name__)

Markup = Callable[[Sequence[Choice]], InlineKeyboardMarkup | None]


class DraftChats:
    """Which private chats take drafts (those that refused them once do not, from then on) and
    a fresh draft id for each reply, so one reply's bubble is animated, not a new one each time."""

    def __init__(self) -> None:
        self._refused: set[int] = set()
        self._ids = itertools.count(1)

    def draft_id(self, key: ConversationKey) -> int | None:
        """A new reply's draft id, or None where its chat shows no drafts."""
        if not is_private(key) or int(key.chat) in self._refused:
            return None
        return next(self._ids)

    def refused(self, chat: int) -> None:
        self._refused.add(chat)


class TelegramLive(EditedLive):
    """A draft bubble in private chats, the kit's sent-then-edited messages elsewhere."""

    def __init__(
        self,
        surface: Surface,
        key: ConversationKey,
        *,
        messages: MessageCalls,
        markup: Markup,
        drafts: DraftChats,
    ) -> None:
        super().__init__(surface, key)
        self._calls = messages
        self._markup = markup
        self._drafts = drafts
        self._draft_id = drafts.draft_id(key)
        self._drafted = ""  # what the bubble shows

    async def show(
        self,
        parts: Sequence[LivePart],
        status: str | None = None,
        buttons: Sequence[Choice] = (),
    ) -> bool:
        if self._draft_id is None or not self._live:
            return await super().show(parts, status, buttons)
        wanted = laid_out(parts, status, self._caps.max_chars, self._caps.count)
        if not wanted:
            return False
        # One bubble: the part being written (finish sends them all). It takes no keyboard, so
        # a private chat has /stop rather than a Stop button.
        text = wanted[-1].text
        if text != self._drafted:
            chat, thread = chat_and_thread(self._key)
            try:
                await self._calls.draft(chat, thread, self._draft_id, text)
            except Rejected as exc:
                log.warning("telegram: drafts refused in chat %s (%s); live messages", chat, exc)
                self._drafts.refused(chat)
                self._draft_id = None
                return await super().show(parts, status, buttons)
            self._drafted = text
        return True

    async def _send(
        self, text: str, *, final: bool, buttons: tuple[Choice, ...], optional: bool
    ) -> MessageRef:
        chat, thread = chat_and_thread(self._key)
        message = await self._calls.post(
            chat,
            thread,
            text,
            formatted=final,
            reply_markup=self._markup(buttons),
            optional=optional,
        )
        return MessageRef(self._key, str(message.message_id))

    async def _edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        final: bool,
        buttons: tuple[Choice, ...],
        optional: bool,
    ) -> None:
        chat, _ = chat_and_thread(ref.key)
        await self._calls.edit_text(
            chat,
            int(ref.id),
            text,
            formatted=final,
            reply_markup=self._markup(buttons),
            optional=optional,
        )
