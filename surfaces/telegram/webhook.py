"""Receiving Telegram updates by webhook: our own aiohttp server, used when a webhook URL is set
(long polling otherwise). Telegram posts one update per request with the secret we registered in
a header; without it nothing is read, and what is read goes to PTB's update queue.

A body with the right secret that is not an update (not JSON, not an object with an `update_id`,
or an object PTB cannot read) is answered 400 with one WARNING line naming what was wrong: never
a 500, never a traceback (PTB's reader raises whatever its constructors do on a wrong shape)."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from telegram import Bot, Update

from config.settings import TelegramSettings
from surfaces.telegram.errors import BOT_API

__all__ = ["ALLOWED_UPDATES", "SECRET_HEADER", "Webhook"]

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ["message", "callback_query"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class Webhook:
    """The server for one PTB `Application` (`app`), started by `start` and stopped by `stop`."""

    def __init__(self, app: Any, settings: TelegramSettings) -> None:
        self._app = app
        self._settings = settings
        self._runner: web.AppRunner | None = None

    async def start(self, bot: Bot) -> None:
        """Listen, then tell Telegram where to post (setWebhook with our secret)."""
        settings = self._settings
        server = web.Application()
        server.router.add_post(urlsplit(settings.webhook_url).path or "/", self._on_request)
        runner = web.AppRunner(server, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, settings.webhook_listen, settings.webhook_port).start()
        await BOT_API.call(
            bot.set_webhook(
                settings.webhook_url,
                secret_token=settings.webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
            )
        )
        log.info(
            "telegram: webhook %s, listening on %s:%d",
            settings.webhook_url,
            settings.webhook_listen,
            settings.webhook_port,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _on_request(self, request: web.Request) -> web.Response:
        """Only with our secret is anything read."""
        secret = request.headers.get(SECRET_HEADER)
        if secret is None:
            return web.Response(status=401)
        if not hmac.compare_digest(secret.encode(), self._settings.webhook_secret.encode()):
            return web.Response(status=403)
        try:
            data = json.loads(await request.read())
        except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the parser
            return _malformed("it is not JSON")
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            return _malformed("it is not an object with an update_id")
        try:
            update = Update.de_json(data, self._app.bot)
        except Exception as exc:  # PTB's reader on a wrong shape: KeyError, TypeError, ...
            return _malformed(f"python-telegram-bot cannot read it ({type(exc).__name__})")
        await self._app.update_queue.put(update)
        return web.Response(status=200)


def _malformed(why: str) -> web.Response:
    log.warning("telegram: refused a webhook request with the right secret: %s", why)
    return web.Response(status=400)
