"""A button press, taken: the bot decides what it means, and Telegram's callback query is
answered as soon as the bot has (or after `answer_wait` seconds, whichever is first: Telegram
shows a spinner on the button until then), with the bot's notice if it gave one. A notice that
comes after the query was answered is a reply to the message that carries the buttons."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from telegram import Bot

from surfaces.base import ChoiceAnswer, OnEvent
from surfaces.errors import SurfaceError
from surfaces.telegram.convert import Press, chat_and_thread
from surfaces.telegram.errors import BOT_API
from surfaces.telegram.messages import MessageCalls

__all__ = ["take_press"]

log = logging.getLogger(__name__)

NOTICE_CHARS = 200  # Telegram's limit for the text of a callback query's answer


async def take_press(
    press: Press,
    token: str,
    on_event: OnEvent,
    *,
    bot: Callable[[], Awaitable[Bot]],
    messages: MessageCalls,
    answer_wait: float,
) -> None:
    """Hand the press of the button whose choice is `token` to the bot and answer its query."""
    answered = False

    async def answer(text: str | None) -> bool:
        nonlocal answered
        if answered:
            return False
        answered = True
        with anyio.CancelScope(shield=True):
            try:
                await BOT_API.call(
                    (await bot()).answer_callback_query(
                        press.query_id,
                        text=text[:NOTICE_CHARS] if text else None,
                        show_alert=True if text else None,
                    )
                )
            except SurfaceError as exc:
                log.info("telegram: could not answer a button press: %s", exc)
        return True

    async def notify(text: str) -> None:
        if not await answer(text):  # too late for the query: a reply to the buttons
            chat, thread = chat_and_thread(press.key)
            await messages.post(chat, thread, text, reply_to=press.message_id)

    event = ChoiceAnswer(press.key, press.user, token, press.event_id, notify)
    async with anyio.create_task_group() as tg:

        async def answer_soon() -> None:
            await anyio.sleep(answer_wait)
            await answer(None)

        tg.start_soon(answer_soon)
        try:
            await on_event(event)
        except Exception:
            log.exception("telegram: the bot failed to take a button press")
        finally:
            tg.cancel_scope.cancel()
    await answer(None)
