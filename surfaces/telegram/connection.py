"""The Bot API connection of one bot: python-telegram-bot's `Application`, built once, signed in
(getMe) on first use and shut down by `close`.

Sending may start before the surface receives (the bot re-delivers replies a restart cut off
before surfaces run) and goes on after it stops receiving (partial output at shutdown), so the
connection is opened by whichever comes first and closed only when the bot is done with the
surface."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from telegram import Bot
from telegram.error import InvalidToken, NetworkError
from telegram.ext import Application, ApplicationBuilder

from config import ConfigError
from config.settings import TelegramSettings
from surfaces.errors import SendFailed
from surfaces.startup import retry_start_up
from surfaces.telegram.convert import BotIdentity
from surfaces.telegram.errors import unreachable

__all__ = ["BotConnection"]

log = logging.getLogger(__name__)

# PTB's Application is generic in six context types this adapter never customises.
Application_ = Application[Any, Any, Any, Any, Any, Any]


class BotConnection:
    """`await bot()` for the signed-in Bot; `me` once signed in; `close()` at the very end."""

    def __init__(self, settings: TelegramSettings, *, pool_size: int) -> None:
        self.app = _build_application(settings, pool_size)
        self.me = BotIdentity(0, "")
        self._signed_in = False
        self._lock = anyio.Lock()

    @property
    def signed_in(self) -> bool:
        return self._signed_in

    async def bot(self) -> Bot:
        """The connected Bot, signing in first if nobody has yet."""
        if not self._signed_in:
            async with self._lock:
                if not self._signed_in:
                    await self._initialize()
                    me = self.app.bot
                    self.me = BotIdentity(me.id, me.username or "")
                    self._signed_in = True
        bot: Bot = self.app.bot
        return bot

    async def _initialize(self) -> None:
        """getMe, retried a few times over network trouble; a rejected token is a setting error."""
        try:
            await retry_start_up(
                self.app.initialize, retry_on=unreachable, surface="telegram", logger=log
            )
        except InvalidToken as exc:
            raise ConfigError(
                "SWITCHBOARD_TELEGRAM__TOKEN", f"Telegram rejected the token ({exc.message})"
            ) from exc
        except NetworkError as exc:
            raise SendFailed(
                f"cannot reach the Telegram Bot API: {exc.message}", transient=True
            ) from exc

    async def close(self) -> None:
        """Stop the Application if it runs and shut the connection down."""
        async with self._lock:
            if self.app.running:
                await self.app.stop()
            if self._signed_in:
                self._signed_in = False
                await self.app.shutdown()


def _build_application(settings: TelegramSettings, pool_size: int) -> Application_:
    # httpcore scans every pooled connection on each request, so a pool much larger than the
    # requests actually in flight costs CPU for nothing; requests beyond it queue.
    builder = (
        ApplicationBuilder()
        .token(settings.token)
        .concurrent_updates(True)
        .connection_pool_size(pool_size)
        .pool_timeout(30.0)
    )
    if settings.api_url:
        base = settings.api_url.rstrip("/")
        builder = builder.base_url(base + "/bot").base_file_url(base + "/file/bot")
    if settings.webhook_url:
        builder = builder.updater(None)
    app: Application_ = builder.build()
    return app
