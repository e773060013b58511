"""The Telegram harness: the fake Bot API (tests/fakes/telegram_api.py), the real
python-telegram-bot through our adapter, served in process by a BotApp or by `switchboard run`.

    async with FakeBotApi() as api, serving(telegram_settings(tmp_path, agent, api, ...)):
        api.dm(ALICE, "hello")                                   # in process

    env = cli_env | run_env(agent, workspace) | telegram_env(api, ALICE)  # run_env: process.py
    async with switchboard_run(env, api, tmp_path) as process:   # `switchboard run`
        api.dm(ALICE, "hello")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.abc

from config import Settings
from surfaces.telegram.adapter import TelegramSurface
from tests.conftest import FakeAgent
from tests.engine_helpers import engine_settings, running_app
from tests.fakes.telegram_api import FakeBotApi, User
from tests.harness.process import START_TIMEOUT, switchboard_process

# The adapter's pacing and timeouts cut for tests (its defaults are Telegram's limits).
FAST: dict[str, Any] = {
    "min_edit_interval": 0.05,
    "group_preview_interval": 0.2,
    "poll_timeout": 2.0,
    "shutdown_timeout": 3.0,
}


def ids(*people: User | str) -> list[str]:
    """Telegram ids as the settings' lists take them."""
    return [str(person.id) if isinstance(person, User) else person for person in people]


def telegram_access(api: FakeBotApi, *allowed: User | str, **more: Any) -> dict[str, Any]:
    """The `telegram` settings on `api` (token, Bot API URL); `allowed` may chat."""
    return {"token": api.token, "api_url": api.url, "allowed_users": ids(*allowed), **more}


def telegram_settings(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, *options: str, **more: Any
) -> Settings:
    """engine_settings with Telegram on `api`; `telegram=` adds to (and overrides) its access."""
    telegram = {"token": api.token, "api_url": api.url, **more.pop("telegram", {})}
    return engine_settings(tmp_path, fake_agent, *options, telegram=telegram, **more)


@asynccontextmanager
async def serving(settings: Settings, **options: Any) -> AsyncIterator[TelegramSurface]:
    """A BotApp serving the adapter built from `settings.telegram` (FAST, then `options`)."""
    assert settings.telegram is not None
    surface = TelegramSurface(settings.telegram, **(FAST | options))
    async with running_app(settings, surface):  # type: ignore[arg-type]
        yield surface


# ---- `switchboard run` ------------------------------------------------------------------------
def telegram_env(api: FakeBotApi, *allowed: User | str) -> dict[str, str]:
    """Telegram on `api`, by long polling (add `webhook_env` for a webhook); `allowed` may chat
    (none: nobody may)."""
    env = {"SWITCHBOARD_TELEGRAM__TOKEN": api.token, "SWITCHBOARD_TELEGRAM__API_URL": api.url}
    if allowed:
        env["SWITCHBOARD_TELEGRAM__ALLOWED_USERS"] = ",".join(ids(*allowed))
    return env


def webhook_env(port: int, secret: str) -> dict[str, str]:
    """Telegram by webhook on 127.0.0.1:`port` (`webhook_url(port)`), signed with `secret`."""
    return {
        "SWITCHBOARD_TELEGRAM__WEBHOOK_URL": webhook_url(port),
        "SWITCHBOARD_TELEGRAM__WEBHOOK_SECRET": secret,
        "SWITCHBOARD_TELEGRAM__WEBHOOK_LISTEN": "127.0.0.1",
        "SWITCHBOARD_TELEGRAM__WEBHOOK_PORT": str(port),
    }


def webhook_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/telegram"


def webhook_set(api: FakeBotApi, url: str) -> bool:
    """The bot registered `url` as its webhook (it listens before it registers)."""
    return url in [call.params.get("url") for call in api.calls_to("setWebhook")]


@asynccontextmanager
async def switchboard_run(
    env: dict[str, str],
    api: FakeBotApi,
    cwd: Path,
    *,
    ready_timeout: float = START_TIMEOUT,
    **options: Any,
) -> AsyncIterator[anyio.abc.Process]:
    """`switchboard run` yielded once it polls for updates (everything it says at start-up has
    been said by then); it must exit 0 on the SIGTERM that stops it (`switchboard_process`)."""
    polls_before = len(api.calls_to("getUpdates"))
    async with switchboard_process(
        env,
        cwd,
        ready=lambda: len(api.calls_to("getUpdates")) > polls_before,
        what="the bot to poll",
        ready_timeout=ready_timeout,
        **options,
    ) as process:
        yield process
