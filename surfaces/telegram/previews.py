"""Telegram's live previews of a reply being written, one design for both kinds of chat (the
capabilities are per surface, not per chat).

In private chats a `sendMessageDraft` bubble, finished by the bot's ordinary `send`. In groups
(and in private chats where drafts are refused) a live message made with `sendMessage` and then
edited, which the final `send` of that conversation takes over: it edits the live message into
the first part of the answer instead of posting a second copy.

Groups allow 20 messages a minute, so group previews wait for the group's window (`Pacing.
preview_wait`): spaced `group_preview_interval` apart, and none while the minute's budget is
nearly spent. A preview that has to wait is shown later by a background flush with the newest
text, never dropped."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import anyio
import anyio.abc
from telegram import InlineKeyboardMarkup

from surfaces.base import ConversationKey
from surfaces.errors import MessageGone, RateLimited, SurfaceError
from surfaces.pacing import Pacing
from surfaces.telegram.convert import chat_and_thread, is_private
from surfaces.telegram.errors import Rejected
from surfaces.telegram.messages import MessageCalls

__all__ = ["LivePreviews"]

log = logging.getLogger(__name__)


@dataclass
class _Live:
    """The live preview message of one conversation (groups, or chats without drafts)."""

    message_id: int | None = None
    shown: str = ""
    pending: str | None = None  # newest preview text not shown yet
    flush_scheduled: bool = False
    closed: bool = False  # taken over by a final send
    markup: InlineKeyboardMarkup | None = None  # the live reply's buttons (a Stop button)
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class LivePreviews:
    """`show` a conversation's preview; `take_over` it when the reply's message is sent. Delayed
    group previews are flushed by tasks of the task group given to `open`."""

    def __init__(self, messages: MessageCalls, pacing: Pacing, *, retry_interval: float) -> None:
        self._messages = messages
        self._pacing = pacing
        self._retry_interval = retry_interval  # after a preview failed, before the next try
        self._tg: anyio.abc.TaskGroup | None = None
        self._lives: dict[ConversationKey, _Live] = {}
        self._no_drafts: set[int] = set()  # private chats that refused drafts
        self._draft_ids: dict[ConversationKey, int] = {}
        self._draft_counter = itertools.count(1)

    def open(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def close(self) -> None:
        """No more background flushes (a preview then is shown at once or not at all)."""
        self._tg = None

    # ---- showing ---------------------------------------------------------------------------
    async def show(
        self, key: ConversationKey, text: str, *, reply_markup: InlineKeyboardMarkup | None = None
    ) -> None:
        chat, thread = chat_and_thread(key)
        if is_private(key) and chat not in self._no_drafts:
            draft_id = self._draft_ids.get(key)
            if draft_id is None:
                draft_id = self._draft_ids[key] = next(self._draft_counter)
            try:
                await self._messages.draft(chat, thread, draft_id, text)
                return
            except Rejected as exc:
                log.warning(
                    "telegram: drafts refused in chat %s (%s); previews as messages", chat, exc
                )
                self._no_drafts.add(chat)
        await self._show_live(key, text, reply_markup)

    async def _show_live(
        self, key: ConversationKey, text: str, reply_markup: InlineKeyboardMarkup | None
    ) -> None:
        live = self._lives.get(key)
        if live is None:
            live = self._lives[key] = _Live()
        live.pending = text
        live.markup = reply_markup
        if live.flush_scheduled:
            return  # the scheduled flush shows the newest text
        wait = self._wait(key)
        if wait > 0 and self._tg is not None:
            live.flush_scheduled = True
            self._tg.start_soon(self._flush_later, key, live, wait)
            return
        await self._flush(key, live)

    def _wait(self, key: ConversationKey) -> float:
        if is_private(key):
            return 0.0  # the bot's pacer is enough
        return self._pacing.preview_wait(key.chat)

    async def _flush(self, key: ConversationKey, live: _Live) -> None:
        chat, thread = chat_and_thread(key)
        async with live.lock:
            text, live.pending = live.pending, None
            if live.closed or text is None or text == live.shown:
                return
            try:
                markup = live.markup
                if live.message_id is None:
                    posted = await self._messages.post(chat, thread, text, reply_markup=markup)
                    live.message_id = posted.message_id
                else:
                    await self._messages.edit_text(chat, live.message_id, text, reply_markup=markup)
            except MessageGone:
                live.message_id, live.shown = None, ""
                raise
            except BaseException:
                if live.pending is None:
                    live.pending = text  # still to show
                raise
            live.shown = text

    async def _flush_later(self, key: ConversationKey, live: _Live, wait: float) -> None:
        try:
            while not live.closed:
                await anyio.sleep(wait)
                wait = self._wait(key)
                if live.closed or wait > 0:
                    continue
                try:
                    await self._flush(key, live)
                    return
                except RateLimited as exc:  # the chat's pacer holds every call back meanwhile
                    wait = exc.retry_after
                except SurfaceError as exc:
                    log.info("telegram: a live preview in %s failed: %s", key, exc)
                    wait = self._retry_interval
                except Exception:  # unmapped: this chat's previews stop, the adapter goes on
                    log.exception("telegram: a live preview in %s failed unexpectedly", key)
                    return
        finally:
            live.flush_scheduled = False

    # ---- the final message -----------------------------------------------------------------
    async def take_over(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool,
        reply_markup: InlineKeyboardMarkup | None = None,
    ) -> int | None:
        """The reply's message is being sent: the next reply starts a fresh draft, and the
        conversation's live preview message, if any, is edited into `text` rather than left as a
        stale copy above it. Returns its id, or None if there was none (or it is gone)."""
        self._draft_ids.pop(key, None)
        live = self._lives.get(key)
        if live is None:
            return None
        chat, _ = chat_and_thread(key)
        async with live.lock:
            live.closed, live.pending = True, None
            message_id = live.message_id
            if message_id is not None:
                try:
                    await self._messages.edit_text(
                        chat, message_id, text, formatted=formatted, reply_markup=reply_markup
                    )
                except MessageGone:
                    message_id = None
                except BaseException:
                    live.closed = False  # the bot will try this send again: adopt then
                    raise
            if self._lives.get(key) is live:
                del self._lives[key]
        return message_id
