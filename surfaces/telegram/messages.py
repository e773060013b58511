"""The Bot API calls that post or change a message, paced and translated, shared by the adapter
and its live replies.

Each passes the chat's pacer once (`Pacing.call`): one call at a time per chat, started no sooner
than `min_edit_interval` after the previous one *finished* (Telegram counts arrivals, and a call
that waited longer on the way would otherwise arrive right behind the one before), counted in the
group's window (an `optional` call, a live update, also waits for it), and a 429 held against the
whole chat. The call itself is shielded from cancellation, bounded (`surfaces.live.one_call`), so
the caller learns whether Telegram has the message. HTML that Telegram cannot parse is sent again
as plain text; an edit that changes nothing is success."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
)
from telegram.constants import ParseMode

from surfaces.live import did_not_answer, one_call
from surfaces.pacing import Pacing
from surfaces.telegram.errors import BOT_API, NotModified, Unparsable
from surfaces.telegram.markup import html_to_plain

__all__ = ["MessageCalls"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_NO_PREVIEWS = LinkPreviewOptions(is_disabled=True)


class MessageCalls:
    """`post`, `edit_text` and `draft` for one bot. `bot()` returns the connected Bot."""

    def __init__(self, bot: Callable[[], Awaitable[Bot]], pacing: Pacing) -> None:
        self._bot = bot
        self._pacing = pacing

    async def paced(self, chat: int, call: Callable[[], Awaitable[T]]) -> T:
        """One call that posts a file in `chat`: paced, not bounded (an upload takes its time)."""
        async with self._pacing.call(str(chat)):
            return await BOT_API.call(call())

    async def _message(
        self, chat: int, call: Callable[[], Awaitable[T]], *, optional: bool = False
    ) -> T:
        """One call that posts or changes a message in `chat` (see the module docstring)."""
        async with self._pacing.call(str(chat), optional=optional):
            with one_call() as bounded:
                answer = await BOT_API.call(call())
        if bounded.cancelled_caught:
            raise did_not_answer()
        return answer

    async def post(
        self,
        chat: int,
        thread: int | None,
        text: str,
        *,
        formatted: bool = False,
        reply_markup: InlineKeyboardMarkup | ForceReply | None = None,
        reply_to: int | None = None,
        optional: bool = False,
    ) -> Message:
        bot = await self._bot()
        options: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": reply_markup,
            "link_preview_options": _NO_PREVIEWS,
        }
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        if formatted:
            try:
                return await self._message(
                    chat,
                    lambda: bot.send_message(chat, text, parse_mode=ParseMode.HTML, **options),
                    optional=optional,
                )
            except Unparsable as exc:
                log.info("telegram: HTML refused (%s); sending plain text", exc.reason)
                text = html_to_plain(text)
        plain = text
        message: Message = await self._message(
            chat, lambda: bot.send_message(chat, plain, **options), optional=optional
        )
        return message

    async def edit_text(
        self,
        chat: int,
        message_id: int,
        text: str,
        *,
        formatted: bool = False,
        reply_markup: InlineKeyboardMarkup | None = None,
        optional: bool = False,
    ) -> None:
        """Edit a message's text and set its buttons to `reply_markup` (None: they go); an
        edit that changes nothing is fine."""
        bot = await self._bot()
        try:
            if formatted:
                try:
                    await self._message(
                        chat,
                        lambda: bot.edit_message_text(
                            text,
                            chat,
                            message_id,
                            parse_mode=ParseMode.HTML,
                            link_preview_options=_NO_PREVIEWS,
                            reply_markup=reply_markup,
                        ),
                        optional=optional,
                    )
                    return
                except Unparsable as exc:
                    log.info("telegram: HTML refused (%s); editing to plain text", exc.reason)
                    text = html_to_plain(text)
            plain = text
            await self._message(
                chat,
                lambda: bot.edit_message_text(
                    plain,
                    chat,
                    message_id,
                    link_preview_options=_NO_PREVIEWS,
                    reply_markup=reply_markup,
                ),
                optional=optional,
            )
        except NotModified:
            return

    async def draft(self, chat: int, thread: int | None, draft_id: int, text: str) -> None:
        """Show `text` in the chat's draft bubble `draft_id` (private chats)."""
        bot = await self._bot()
        await self._message(
            chat,
            lambda: bot.send_message_draft(chat, draft_id, text, message_thread_id=thread),
            optional=True,  # a live update
        )
