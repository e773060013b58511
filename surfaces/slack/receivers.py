"""How Slack's events reach bolt: Socket Mode (a websocket Slack opens for an app token) or HTTP
mode (our aiohttp server, to which Slack posts signed requests). Either runs until cancelled and
then stops receiving within 5 seconds; what bolt does with an event is the adapter's."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from config import ConfigError
from surfaces.slack.errors import Refused, api_error

__all__ = ["EVENTS_PATH", "run_http", "run_socket_mode"]

EVENTS_PATH = "/slack/events"
STOP_TIMEOUT = 5.0  # seconds to close the websocket or the server once cancelled


async def run_socket_mode(
    app: AsyncApp,
    client: AsyncWebClient,
    app_token: str,
    *,
    logger: logging.Logger,
    ping_interval: float,
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """Receive over Socket Mode. slack_sdk reconnects by itself (logging to `logger`); a rejected
    app token is a setting error, not a reconnect loop, so the first URL is asked for here."""
    handler = AsyncSocketModeHandler(
        app, app_token, logger=logger, web_client=client, ping_interval=ping_interval
    )
    try:
        try:
            opened = await client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            error = api_error(exc)
            if isinstance(error, Refused):
                raise ConfigError(
                    "SWITCHBOARD_SLACK__APP_TOKEN",
                    f"Slack refused to open a Socket Mode connection ({error.error})",
                ) from exc
            raise error from exc
        handler.client.wss_uri = str(opened["url"])
        await handler.connect_async()  # type: ignore[no-untyped-call]
        task_status.started()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_TIMEOUT):
            await handler.close_async()  # type: ignore[no-untyped-call]


async def run_http(
    app: AsyncApp,
    listen: str,
    port: int,
    *,
    on_bound: Callable[[int], None],
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """Receive Slack's requests on `listen:port` (`on_bound` learns the port, for port 0). Bolt
    verifies each request's signature before anything in it is parsed."""

    async def handle(request: web.Request) -> web.Response:
        response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    server = web.Application()
    server.router.add_post(EVENTS_PATH, handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, listen, port)
        await site.start()
        addresses = runner.addresses
        on_bound(int(addresses[0][1]) if addresses else port)
        task_status.started()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_TIMEOUT):
            await runner.cleanup()
