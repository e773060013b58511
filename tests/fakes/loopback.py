"""The request plumbing the fake platform servers (telegram_api, slack_api, discord_api) share:
an aiohttp application served on 127.0.0.1 at a free port, started by `start()` or `async with`
and stopped by `close()`, on whichever event loop starts it (a test's, or a bench's own thread).

A fake adds its routes in `_routes` and says its goodbyes in `_before_close` (closing its
websockets, waking its long polls) before the runner stops; `_runner_options` are passed to
`web.AppRunner` as they are."""

from __future__ import annotations

from typing import Any, ClassVar, Self

import anyio
from aiohttp import web


class LoopbackServer:
    _runner_options: ClassVar[dict[str, Any]] = {"access_log": None, "handle_signals": False}

    def __init__(self) -> None:
        self.port = 0  # bound by start()
        self._runner: web.AppRunner | None = None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _before_close(self) -> None:
        return None

    async def start(self) -> Self:
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app, **self._runner_options)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        await self._before_close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):  # a cancelled test still frees its port
            await self.close()
