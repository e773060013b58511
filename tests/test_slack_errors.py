"""The Slack surface's error table (`surfaces/slack/errors.py`): what each slack_sdk failure means
for the bot, and which start-up failures are worth another try."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError, SlackClientError

from surfaces.errors import MessageGone, RateLimited, SendFailed
from surfaces.slack.errors import WEB_API, Refused, unreachable


def answer(status: int, error: str = "", headers: dict[str, str] | None = None) -> SlackApiError:
    data: dict[str, Any] = {"ok": False, "error": error} if error else {}
    response = SimpleNamespace(status_code=status, data=data, headers=headers or {})
    return SlackApiError("refused", response)


def test_a_429_waits_for_its_retry_after_header_or_a_second() -> None:
    limited = WEB_API.translate(answer(429, headers={"retry-after": "7"}))
    assert isinstance(limited, RateLimited) and limited.retry_after == 7.0
    unreadable = WEB_API.translate(answer(200, "ratelimited", {"Retry-After": "soon"}))
    assert isinstance(unreadable, RateLimited) and unreadable.retry_after == 1.0


@pytest.mark.parametrize(
    ("exc", "kind", "transient"),
    [
        (answer(200, "message_not_found"), MessageGone, None),
        (answer(503), SendFailed, True),
        (answer(200, "fatal_error"), SendFailed, True),
        (answer(200, "channel_not_found"), Refused, False),
        (SlackClientError("bad arguments"), SendFailed, False),
        (aiohttp.ClientConnectionError("refused"), SendFailed, True),
        (TimeoutError(), SendFailed, True),
    ],
)
def test_each_failure_becomes_the_surface_error_the_bot_acts_on(
    exc: Exception, kind: type[Exception], transient: bool | None
) -> None:
    error = WEB_API.translate(exc)
    assert type(error) is kind
    if transient is not None:
        assert isinstance(error, SendFailed) and error.transient is transient


def test_a_refusal_keeps_slacks_error_code() -> None:
    error = WEB_API.translate(answer(200, "not_in_channel"))
    assert isinstance(error, Refused) and error.error == "not_in_channel"
    assert WEB_API.translate(ValueError("a bug")) is None  # not Slack's: passes unchanged


def test_start_up_retries_network_trouble_and_429s_but_not_a_rejected_token() -> None:
    assert unreachable(aiohttp.ClientConnectionError("down")) is not None
    assert unreachable(answer(429)) is not None
    assert unreachable(answer(500)) is not None
    assert unreachable(answer(200, "invalid_auth")) is None
    assert unreachable(ValueError("a bug")) is None
