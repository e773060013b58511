"""The Discord harness: the fake Discord (tests/fakes/discord_api.py: REST, gateway, CDN) and the real
discord.py through our adapter, served alone, in a BotApp, or by `switchboard run`.

    settings = engine_settings(tmp_path, agent, discord=discord_access(fake, alice))
    async with serving(settings) as (app, surface):              # connected, guilds loaded
        fake.dm(alice, "hello")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.abc

from bot.app import BotApp
from config import Settings
from config.settings import DiscordSettings
from surfaces.discord.adapter import DiscordSurface
from tests.engine_helpers import running_app, wait_for
from tests.fakes.discord_api import FakeDiscord, User
from tests.harness.process import START_TIMEOUT, switchboard_process

# The adapter's pacing cut for tests, and no wait for guilds the fake never announces.
FAST: dict[str, Any] = {"min_edit_interval": 0.1, "guild_ready_timeout": 0.05}


def _ids(*people: User | str) -> list[str]:
    return [person.id if isinstance(person, User) else person for person in people]


def discord_access(fake: FakeDiscord, *allowed: User | str, **more: Any) -> dict[str, Any]:
    """The `discord` settings on `fake` (token, REST and gateway URLs); `allowed` may chat."""
    return {
        "token": fake.token,
        "api_url": fake.api_url,
        "gateway_url": fake.gateway_url,
        "allowed_users": _ids(*allowed),
        **more,
    }


def fast_surface(settings: DiscordSettings | None, **options: Any) -> DiscordSurface:
    """The adapter on `settings` with FAST, then `options`."""
    assert settings is not None
    return DiscordSurface(settings, **(FAST | options))


@asynccontextmanager
async def serving(
    settings: Settings, **options: Any
) -> AsyncIterator[tuple[BotApp, DiscordSurface]]:
    """A BotApp serving the adapter, yielded once discord.py is connected and has its guilds."""
    surface = fast_surface(settings.discord, **options)
    async with running_app(settings, surface) as app:  # type: ignore[arg-type]
        await wait_for(surface.is_ready, "discord.py to connect and load the guild")
        yield app, surface


def discord_env(fake: FakeDiscord, *allowed: User | str) -> dict[str, str]:
    """Discord on `fake` for `switchboard run`; `allowed` may chat."""
    return {
        "SWITCHBOARD_DISCORD__TOKEN": fake.token,
        "SWITCHBOARD_DISCORD__API_URL": fake.api_url,
        "SWITCHBOARD_DISCORD__GATEWAY_URL": fake.gateway_url,
        "SWITCHBOARD_DISCORD__ALLOWED_USERS": ",".join(_ids(*allowed)),
    }


@asynccontextmanager
async def switchboard_run(
    env: dict[str, str], fake: FakeDiscord, cwd: Path, **options: Any
) -> AsyncIterator[anyio.abc.Process]:
    """`switchboard run` yielded once it identified on the gateway and registered its commands;
    it must exit 0 on the SIGTERM that stops it (`switchboard_process`)."""
    async with switchboard_process(
        env,
        cwd,
        ready=lambda: fake.identifies and fake.commands,
        what="the bot to connect",
        ready_timeout=options.pop("ready_timeout", START_TIMEOUT),
        **options,
    ) as process:
        yield process
