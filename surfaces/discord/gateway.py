"""The discord.py client: how it is built (intents, sharding, endpoints), logged in, kept
connected to the gateway, given the slash commands, and closed.

One client serves the whole bot. With `shard_count` set it is an `AutoShardedClient` that opens
one gateway session per shard; otherwise a plain `Client` with one session. Among replicas
(`shards.py`) it is an `AutoShardedClient` of the shards this replica holds; discord.py cannot
add a shard to a connected client, so the adapter replaces the client to take more. It reads
only what the bot needs (guilds for the channel and thread cache, guild and DM messages, and
message content, a privileged intent enabled in the Developer Portal), caches no messages, and
chunks no members.
discord.py reconnects and resumes the gateway by itself; the ERROR records it logs on the way are
turned into one WARNING line each (`tame_reconnect_logs`).

Pointing at other endpoints (tests): `api_url` and `gateway_url` are applied per client, by
rebasing each request's URL in this client's HTTP object (`rebase`; the interaction webhooks do
the same in `interactions.py`), and by sending the first gateway connection to `gateway_url` (a
resume goes where READY said, untouched)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import anyio
import yarl

from config.settings import DiscordSettings
from surfaces.discord.convert import command_payloads
from surfaces.discord.errors import SDK_FAILURES, gateway_refused, login_refused
from surfaces.discord.sdk import DiscordWebSocket, Route, discord
from surfaces.recovered_faults import RecoveredFaults, tame

__all__ = [
    "NO_MENTIONS",
    "build_client",
    "close_client",
    "disconnect_shard",
    "log_in",
    "rebase",
    "stay_connected",
    "sync_commands",
    "tame_reconnect_logs",
]

log = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
CLOSE_TIMEOUT = 5.0
MAX_RATELIMIT_WAIT = 30.0  # discord.py waits out a bucket's 429 up to this long, then raises

Handler = Callable[..., Awaitable[None]]


def _gateway_reconnect(record: logging.LogRecord, fault: BaseException | None) -> bool:
    """discord.py logs these (as errors with a traceback) right before it reconnects and
    resumes the gateway by itself, after a dropped connection or a timeout."""
    return isinstance(record.msg, str) and record.msg.startswith(
        ("Attempting a reconnect", "Failed to connect for shard_id")
    )


_GATEWAY_RECONNECTS = RecoveredFaults("discord", _gateway_reconnect)


def tame_reconnect_logs() -> None:
    for logger in ("discord.client", "discord.shard"):
        tame(logger, _GATEWAY_RECONNECTS)


def rebase(url: str, base: str) -> str:
    """A Discord API URL moved to `base` (other URLs as they are)."""
    return base + url[len(Route.BASE) :] if url.startswith(Route.BASE) else url


def build_client(
    settings: DiscordSettings,
    *,
    guild_ready_timeout: float,
    handlers: dict[str, Handler],
    shard_ids: Sequence[int] | None = None,
) -> discord.Client:
    """A client for `settings`, its events (`on_message`, ...) going to `handlers`; it logs
    its connections itself. With `shard_ids` (shard leases, `shards.py`) it connects only
    those shards of `max(1, shard_count)`."""
    # Voice is never used: no start-up warnings about its optional libraries.
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False
    intents = discord.Intents.none()
    intents.guilds = True  # the channel and thread cache
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True  # privileged: enable it in the Developer Portal
    options: dict[str, Any] = {
        "intents": intents,
        "allowed_mentions": NO_MENTIONS,
        "guild_ready_timeout": guild_ready_timeout,
        "chunk_guilds_at_startup": False,
        "max_messages": None,
        "max_ratelimit_timeout": MAX_RATELIMIT_WAIT,
    }
    client: discord.Client
    if shard_ids is not None:
        client = discord.AutoShardedClient(
            shard_ids=list(shard_ids), shard_count=max(1, settings.shard_count), **options
        )
    elif settings.shard_count > 0:
        client = discord.AutoShardedClient(shard_count=settings.shard_count, **options)
    else:
        client = discord.Client(**options)
    _point_at_endpoints(client, settings)

    async def on_ready() -> None:
        log.info("connected to Discord as %s", client.user)

    async def on_resumed() -> None:
        log.info("Discord gateway session resumed")

    for name, handler in {"on_ready": on_ready, "on_resumed": on_resumed, **handlers}.items():
        setattr(client, name, handler)  # discord.py looks the events up by name
    return client


def _point_at_endpoints(client: discord.Client, settings: DiscordSettings) -> None:
    http = client.http
    base = settings.api_url.rstrip("/")
    if base:
        send = http.request

        async def request(route: Route, **kwargs: Any) -> Any:
            route.url = rebase(route.url, base)
            return await send(route, **kwargs)

        setattr(http, "request", request)  # noqa: B010 - replaces this client's method only
    if settings.gateway_url:
        gateway = yarl.URL(settings.gateway_url)
        default = str(DiscordWebSocket.DEFAULT_GATEWAY)
        connect = http.ws_connect

        async def ws_connect(url: str, *, compress: int = 0) -> Any:
            if url.startswith(default):  # a resume goes where READY said, untouched
                url = str(gateway.with_query(yarl.URL(url).query))
            return await connect(url, compress=compress)

        setattr(http, "ws_connect", ws_connect)  # noqa: B010


async def log_in(client: discord.Client, token: str) -> None:
    """Log in over REST (who the bot is); a rejected token is a ConfigError."""
    try:
        await client.login(token)
    except Exception as exc:
        refused = login_refused(exc)
        if refused is None:
            raise
        raise refused from exc


async def stay_connected(client: discord.Client) -> None:
    """Hold the gateway session(s) open until the client closes; discord.py reconnects and
    resumes by itself, so this ends early only for what no reconnect mends."""
    try:
        await client.connect(reconnect=True)
    except Exception as exc:
        refused = gateway_refused(exc)
        if refused is None:
            raise
        raise refused from exc


async def sync_commands(client: discord.Client, commands: Sequence[tuple[str, str]]) -> None:
    """The bot's command menu as global slash commands (`!` commands work without them)."""
    application = client.application_id
    if not commands or application is None:
        return
    payload = command_payloads(commands)
    try:
        await client.http.bulk_upsert_global_commands(application, cast(Any, payload))
    except SDK_FAILURES as exc:
        log.warning("could not register the slash commands (! commands still work): %s", exc)


async def disconnect_shard(client: discord.Client, shard: int) -> None:
    """Close one shard's gateway session; the client (and its REST side) stays open."""
    info = client.get_shard(shard) if isinstance(client, discord.AutoShardedClient) else None
    if info is not None:
        with anyio.move_on_after(CLOSE_TIMEOUT):
            await info.disconnect()


async def close_client(client: discord.Client) -> None:
    if not client.is_closed():
        with anyio.move_on_after(CLOSE_TIMEOUT):
            await client.close()
