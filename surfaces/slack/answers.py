"""Typed answers on Slack (`SlackSurface.ask_text`, the `AsksForText` ability): the prompt
mentions the person in a channel, and their next message there reaches the bot though it
mentions nobody (`surfaces.awaited_replies`).

A channel conversation is a thread, and the bot already takes every message in a thread it knows;
what it would drop is a plain message in a thread it forgot (its memory of threads is bounded) and
one written at the channel's top level, where a person answering a question often types. Either,
from the person asked and while their answer is awaited in a thread of that channel, is taken as
a message in that thread. A message in another thread stays that thread's (and is dropped as
before); nobody else's message is ever taken."""

from __future__ import annotations

import re
from typing import Any

from surfaces.awaited_replies import AwaitedReplies
from surfaces.base import ConversationKey
from surfaces.slack.convert import SlackMessage, message_from_event
from surfaces.text import escape_angle_brackets

__all__ = ["asking_text", "awaited_message"]

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")


def asking_text(key: ConversationKey, prompt: str, user: str) -> str:
    """The prompt as Slack mrkdwn, with the person's mention first outside a DM."""
    text = escape_angle_brackets(prompt)
    if key.chat.startswith("D") or not _USER_ID.fullmatch(user):
        return text
    return f"<@{user}> {text}"


def awaited_message(
    event: dict[str, Any], awaited: AwaitedReplies, *, surface: str, bot_user_id: str, team_id: str
) -> SlackMessage | None:
    """A channel message the adapter did not take, taken as the answer the bot awaits from its
    author in a thread of that channel (see the module's doc), or None. The note goes with it."""
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not isinstance(user, str) or not isinstance(channel, str) or not isinstance(ts, str):
        return None
    key = awaited.awaited_in(ConversationKey(surface, channel), user)
    if key is None or not key.thread:
        return None
    thread = str(event.get("thread_ts") or "")
    if thread and thread != ts and thread != key.thread:
        return None  # written in another thread: that thread's
    message = message_from_event(
        dict(event, thread_ts=key.thread),
        bot_user_id=bot_user_id,
        in_known_thread=lambda _channel, _thread: True,
        team_id=team_id,
    )
    if message is not None:
        awaited.take(key, user)
    return message
