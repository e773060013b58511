"""A button press on Slack as the bot's `ChoiceAnswer`: who pressed what where, and how to answer
only them (an ephemeral message in the conversation, `notify`)."""

from __future__ import annotations

import logging
from typing import Any

from surfaces.base import ChoiceAnswer, ConversationKey, UserRef
from surfaces.errors import SurfaceError
from surfaces.slack.convert import press_from_payload
from surfaces.slack.web_api import WebApi
from surfaces.text import escape_angle_brackets

__all__ = ["answer_of"]

log = logging.getLogger(__name__)


def answer_of(api: WebApi, surface: str, body: dict[str, Any]) -> ChoiceAnswer | None:
    """The press in an interactive payload, or None when it is not one of our buttons."""
    press = press_from_payload(body)
    if press is None:
        return None
    user = press.user

    async def notify(text: str) -> None:
        try:
            await api.call(
                press.channel,
                api.web.chat_postEphemeral,
                channel=press.channel,
                user=user,
                text=escape_angle_brackets(text),
                thread_ts=press.thread or None,
            )
        except SurfaceError as exc:
            log.warning("slack: could not tell %s: %s", user, exc)

    key = ConversationKey(surface, press.channel, press.thread)
    return ChoiceAnswer(key, UserRef(user, press.user_name), press.token, press.event_id, notify)
