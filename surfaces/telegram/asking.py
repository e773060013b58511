"""Asking a person for text on Telegram: the question carries a force reply, so their client
opens the reply box on it, and their answer is a reply to it (which a group's bot in privacy
mode receives like any message addressed to it).

In a group the force reply is `selective`: it opens only for the people the message targets,
which Telegram reads as the sender of the message it replies to, or someone it mentions. So the
question replies to the person's last message in that conversation (chat and forum topic) when
the adapter saw one, else it mentions them by id (a text mention: it works without a
username)."""

from __future__ import annotations

import html

from telegram import ForceReply

from surfaces.base import ConversationKey, MessageRef, UserRef
from surfaces.bounded import BoundedMap
from surfaces.telegram.convert import chat_and_thread, is_private
from surfaces.telegram.messages import MessageCalls

__all__ = ["PLACEHOLDER", "TextAsks"]

LAST_MESSAGES = 5000  # (conversation, person) -> their latest message id, remembered
PLACEHOLDER = "Your answer"  # the reply box's hint (Telegram takes 1-64 characters)


class TextAsks:
    """`saw` each person's latest message; `ask` them for text."""

    def __init__(self, messages: MessageCalls) -> None:
        self._messages = messages
        self._last: BoundedMap[tuple[ConversationKey, str], int] = BoundedMap(LAST_MESSAGES)

    def saw(self, key: ConversationKey, user: UserRef, message_id: int) -> None:
        if message_id and not is_private(key):
            self._last.remember((key, user.id), message_id)

    async def ask(self, key: ConversationKey, prompt: str, user: UserRef) -> MessageRef:
        chat, thread = chat_and_thread(key)
        markup = ForceReply(selective=True, input_field_placeholder=PLACEHOLDER)
        if is_private(key):  # only the person is there to answer
            message = await self._messages.post(chat, thread, prompt, reply_markup=markup)
            return MessageRef(key, str(message.message_id))
        last = self._last.get((key, user.id))
        if last is not None:
            message = await self._messages.post(
                chat, thread, prompt, reply_markup=markup, reply_to=last
            )
        else:
            mention = f'<a href="tg://user?id={html.escape(user.id)}">{html.escape(user.label)}</a>'
            text = f"{mention} {html.escape(prompt, quote=False)}"
            message = await self._messages.post(
                chat, thread, text, formatted=True, reply_markup=markup
            )
        return MessageRef(key, str(message.message_id))
