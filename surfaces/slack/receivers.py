"""How Slack's events reach bolt: Socket Mode (a websocket Slack opens for an app token) or HTTP
mode (our aiohttp server, to which Slack posts signed requests). Either runs until cancelled and
then stops receiving within 5 seconds; what bolt does with an event is the adapter's.

In HTTP mode the signature is checked here, over the raw bytes, before anything in the body is
parsed (bolt parses first, and a body it cannot parse would be a 500 to anyone): an unsigned or
wrongly signed request is a 401 and says nothing in the log. A signed body that is not UTF-8, not
JSON or form data bolt can read, or not shaped as Slack sends it (surfaces/slack/request_shape.py)
is a 400 with one WARNING line, never a 500 or a traceback."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import anyio
import anyio.abc
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import build_normalized_headers, extract_content_type, parse_body
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from config import ConfigError
from surfaces.slack.errors import Refused, api_error
from surfaces.slack.request_shape import problem

log = logging.getLogger(__name__)

__all__ = ["EVENTS_PATH", "run_http", "run_socket_mode"]

EVENTS_PATH = "/slack/events"
STOP_TIMEOUT = 5.0  # seconds to close the websocket or the server once cancelled
SIGNATURE_MAX_AGE = 300  # seconds; an older signed request may be a replay (Slack's own rule)


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


def signed(body: bytes, headers: Mapping[str, str], secret: str, now: float) -> bool:
    """Whether `body` carries Slack's signature made with `secret` within the last 5 minutes."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not timestamp.isdigit() or abs(now - int(timestamp)) > SIGNATURE_MAX_AGE:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode())


def _malformed(why: str) -> web.Response:
    log.warning("slack: refused a signed request: %s", why)
    return web.Response(status=400)


async def run_http(
    app: AsyncApp,
    listen: str,
    port: int,
    *,
    signing_secret: str,
    on_bound: Callable[[int], None],
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    """Receive Slack's requests on `listen:port` (`on_bound` learns the port, for port 0). Each
    request's signature is checked before anything in it is parsed (see the module's doc)."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if not signed(body, request.headers, signing_secret, time.time()):
            return web.json_response({"error": "invalid request"}, status=401)
        headers: dict[str, str | Sequence[str]] = dict(request.headers)
        content_type = extract_content_type(build_normalized_headers(headers))
        try:  # parsed as bolt will parse it, to check it before bolt reads it
            text = body.decode()
            parsed = parse_body(text, content_type)
        except (ValueError, RecursionError):  # not UTF-8, or not JSON where JSON is due
            return _malformed("its body cannot be read as JSON or form data")
        if why := problem(parsed):
            return _malformed(why)
        bolt_request = AsyncBoltRequest(body=text, query=request.query_string, headers=headers)
        return await to_aiohttp_response(await app.async_dispatch(bolt_request))

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
