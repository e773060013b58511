"""The Discord error tables: what each discord.py failure becomes for the bot."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest

from config import ConfigError
from surfaces.discord.errors import EDITS, REST, gateway_refused, login_refused
from surfaces.discord.sdk import discord
from surfaces.errors import MessageGone, RateLimited, SendFailed


def http_error(kind: type[discord.HTTPException], status: int, **headers: str) -> Exception:
    response = cast(Any, SimpleNamespace(status=status, reason="", headers=headers))
    return kind(response, {"message": "no", "code": 0})


def closed(code: int) -> discord.ConnectionClosed:
    return discord.ConnectionClosed(cast(Any, SimpleNamespace(close_code=code)), shard_id=None)


def test_a_429_discord_py_does_not_retry_is_rate_limited_for_as_long_as_it_says() -> None:
    limited = REST.translate(http_error(discord.HTTPException, 429, **{"retry-after": "2.5"}))
    assert isinstance(limited, RateLimited) and limited.retry_after == 2.5
    unsaid = REST.translate(http_error(discord.HTTPException, 429))
    assert isinstance(unsaid, RateLimited) and unsaid.retry_after == 1.0
    waited = REST.translate(discord.RateLimited(7.0))
    assert isinstance(waited, RateLimited) and waited.retry_after == 7.0


def test_refusals_are_final_and_server_or_network_trouble_is_worth_a_retry() -> None:
    for failure, transient in [
        (http_error(discord.Forbidden, 403), False),
        (http_error(discord.NotFound, 404), False),
        (http_error(discord.DiscordServerError, 503), True),
        (aiohttp.ClientConnectionError("reset"), True),
        (TimeoutError(), True),
    ]:
        error = REST.translate(failure)
        assert isinstance(error, SendFailed) and error.transient is transient, failure


def test_a_404_on_an_edit_means_the_message_is_gone() -> None:
    assert isinstance(EDITS.translate(http_error(discord.NotFound, 404)), MessageGone)
    assert isinstance(EDITS.translate(http_error(discord.HTTPException, 429)), RateLimited)


def test_a_rejected_token_or_intent_names_the_setting_and_a_bug_passes_unchanged() -> None:
    for refused in [
        login_refused(discord.LoginFailure("bad")),
        gateway_refused(discord.PrivilegedIntentsRequired(None)),
        gateway_refused(closed(4004)),
    ]:
        assert isinstance(refused, ConfigError)
        assert refused.setting == "SWITCHBOARD_DISCORD__TOKEN"
    ended = gateway_refused(closed(4010))
    assert isinstance(ended, SendFailed) and not ended.transient
    assert isinstance(login_refused(OSError("down")), SendFailed)
    assert login_refused(KeyError("bug")) is None and REST.translate(KeyError("bug")) is None
    with pytest.raises(KeyError), REST.translated():
        raise KeyError("bug")
