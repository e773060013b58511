"""The one HTTP server `switchboard run` serves while it runs (`SWITCHBOARD_HTTP__LISTEN`,
`SWITCHBOARD_HTTP__PORT`; `off`: none), on aiohttp's web server:

- `/healthz`: 200 while the process serves (nothing else is checked: a liveness probe);
- `/readyz`: 200 when the store is writable, every surface is connected and the default
  project's agent started the last time it was started; else 503 naming what is not. Nothing is
  spawned per probe (see bot/probes.py, which says how each kind of surface counts);
- `/metrics`: Prometheus text (bot/metrics.py), behind `SWITCHBOARD_HTTP__METRICS_TOKEN` when set;
- every route a surface adds with `add_routes(app)` (the dashboard), mounted before it starts.

Before any route, the edge (bot/http_edge.py): the Host header checked, the client's address
read through trusted proxies, open connections capped per address. A connection that has not
sent a whole request line and headers within `SWITCHBOARD_HTTP__HEADER_TIMEOUT` s of opening or
of its last response is closed: aiohttp's keep-alive timer runs from the connection's start and
closes it whenever it is waiting for a request, half-sent or none, so it bounds both.

The port is bound before anything else starts (`bind`), so a port that is taken stops the start
with one sentence naming the setting, before any surface connects; serving starts after the
surfaces (`serve`, in the app's task group) and ends when that group is cancelled."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.abc
from aiohttp import web

from bot.http_edge import ConnectionCap, HostCheck, TrustedProxies, edge_middleware
from bot.metrics import CONTENT_TYPE
from config.settings import HttpSettings
from surfaces.abilities import ServesRoutes

log = logging.getLogger(__name__)

# How long stopping waits for requests in flight (a dashboard's open WebSockets included).
SHUTDOWN_TIMEOUT = 2.0

Readiness = Callable[[], Awaitable[dict[str, str]]]
MetricsText = Callable[[], Awaitable[bytes]]


class HttpServerError(Exception):
    """The HTTP server cannot listen where the settings say."""

    def __init__(self, listen: str, port: int, reason: str) -> None:
        self.listen = listen
        self.port = port
        self.reason = reason
        super().__init__(
            f"The HTTP server cannot listen on {listen}:{port} ({reason}); set "
            "SWITCHBOARD_HTTP__PORT to a free port (or off), or SWITCHBOARD_HTTP__LISTEN."
        )


def _reason(exc: OSError) -> str:
    # create_server appends the address to strerror; the sentence names it already
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


class HttpServer:
    def __init__(
        self, settings: HttpSettings, *, readiness: Readiness, metrics: MetricsText
    ) -> None:
        self.settings = settings
        self._readiness = readiness
        self._metrics = metrics
        proxies = TrustedProxies(settings.trusted_proxies)
        self.hosts = HostCheck(settings.allowed_hosts, settings.listen)
        self._cap = ConnectionCap(settings.max_connections_per_address, proxies)
        self.app = web.Application(middlewares=[edge_middleware(self.hosts, proxies)])
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics_page)
        self._sock: socket.socket | None = None

    @property
    def port(self) -> int | None:
        """The port bound (the real one when the setting is 0), None before `bind`."""
        return self._sock.getsockname()[1] if self._sock is not None else None

    def mount(self, surfaces: Sequence[ServesRoutes]) -> None:
        """The routes of every surface that serves pages here (the dashboard)."""
        for surface in surfaces:
            surface.add_routes(self.app)

    def bind(self) -> None:
        listen, port = self.settings.listen, self.settings.port or 0
        try:
            family = socket.getaddrinfo(
                listen, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]
            sock = socket.create_server((listen, port), family=family)
        except socket.gaierror as exc:
            raise HttpServerError(listen, port, "no such address") from exc
        except OSError as exc:  # taken, or not ours to bind
            raise HttpServerError(listen, port, _reason(exc)) from exc
        sock.setblocking(False)
        self._sock = sock

    def close_unserved(self) -> None:
        """Release a port bound but never served (the start failed after `bind`)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        assert self._sock is not None, "bind() first"
        runner = web.AppRunner(
            self.app,
            access_log=None,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            keepalive_timeout=self.settings.header_timeout,
        )
        listening: asyncio.Server | None = None
        try:
            await runner.setup()
            assert runner.server is not None
            # aiohttp's own sites take no protocol wrapper: the server is created here instead,
            # each connection admitted by the cap before aiohttp's protocol sees it
            listening = await asyncio.get_running_loop().create_server(
                self._cap.factory(runner.server), sock=self._sock
            )
            log.info("serving HTTP on %s:%s", self.settings.listen, self.port)
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_TIMEOUT + 1):
                if listening is not None:
                    listening.close()  # no new connections; the open ones end with the runner
                await runner.cleanup()
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    # ---- the routes -----------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        problems = await self._readiness()
        body: dict[str, Any] = {"ready": not problems}
        if problems:
            body["not_ready"] = problems
        return web.json_response(body, status=503 if problems else 200)

    async def _metrics_page(self, request: web.Request) -> web.Response:
        token = self.settings.metrics_token
        if token and not _bearer_matches(request.headers.get("Authorization", ""), token):
            return web.Response(
                status=401,
                text="A bearer token is required.\n",
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        return web.Response(body=await self._metrics(), headers={"Content-Type": CONTENT_TYPE})


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())
