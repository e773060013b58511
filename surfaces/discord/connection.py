"""This replica's discord.py client and the shards it connects. Alone, the client connects every
shard. With the cluster's leases (`set_leases`), it starts with none and connects exactly the
shards whose lease it holds (`shards.py` says which; `reshard` makes it so)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import anyio
import anyio.abc

from config import ConfigError
from config.settings import DiscordSettings
from surfaces.base import ClusterLeases, ConversationKey
from surfaces.discord.errors import SDK_FAILURES
from surfaces.discord.gateway import (
    CLOSE_TIMEOUT,
    Handler,
    build_client,
    close_client,
    disconnect_shard,
    log_in,
    stay_connected,
)
from surfaces.discord.sdk import discord
from surfaces.discord.shards import ShardLeases
from surfaces.errors import SendFailed

__all__ = ["Connection"]

log = logging.getLogger(__name__)

RESHARD_LOGIN_TIMEOUT = 15.0  # a new client's log-in, when this replica takes more shards
# Why a new client for more shards may not log in (the old one then keeps its shards).
_RESHARD_FAILURES: tuple[type[Exception], ...] = (
    *SDK_FAILURES,
    TimeoutError,
    ConfigError,
    SendFailed,
)


class Connection:
    """The client (`client`, replaced when the shards grow) and its shards (`shards`)."""

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        guild_ready_timeout: float,
        handlers: dict[str, Handler],
    ) -> None:
        self._settings = settings
        self._guild_ready_timeout = guild_ready_timeout
        self._handlers = handlers
        self.client: discord.Client | None = None
        self.leases: ClusterLeases | None = None
        self.shards: frozenset[int] = frozenset()  # connected, with shard leases
        self._connecting = False  # the client's gateway connection was started
        self._tg: anyio.abc.TaskGroup | None = None

    async def log_in(self) -> discord.Client:
        """A new client, logged in (with shard leases, with no shard: `shards.py` says which)."""
        client = self.client = self._new_client(None if self.leases is None else ())
        await log_in(client, self._settings.token)
        return client

    def connect(self, tg: anyio.abc.TaskGroup) -> None:
        """Connect in `tg`: every shard, or with leases the shards held, as they change."""
        self._tg = tg
        client = self.client
        assert client is not None
        if self.leases is None:
            tg.start_soon(stay_connected, client)
            self._connecting = True
        else:
            tg.start_soon(self._follow_shard_leases, self.leases, client)

    def stopped(self) -> None:
        self._tg = None

    def _new_client(self, shard_ids: Sequence[int] | None) -> discord.Client:
        return build_client(
            self._settings,
            guild_ready_timeout=self._guild_ready_timeout,
            handlers=self._handlers,
            shard_ids=shard_ids,
        )

    async def _follow_shard_leases(self, leases: ClusterLeases, client: discord.Client) -> None:
        application = client.application_id
        if application is None:  # discord.py learns it at log-in; without it no lease name
            log.error("discord: no application id after the log-in; connecting no shard")
            return
        shards = ShardLeases(
            leases,
            application,
            max(1, self._settings.shard_count),
            connect=self.reshard,
            stop_timeout=CLOSE_TIMEOUT,
        )
        await shards.run()

    async def reshard(self, shards: frozenset[int]) -> frozenset[int]:
        """Connect exactly `shards`; the shards connected afterwards. Fewer: the others are
        disconnected, the client stays. More (or one to drop that is still connecting):
        discord.py cannot change a connected client's shards, so a new client is logged in
        (sending moves to it), then the old one is closed before the new one connects, so no
        shard is ever connected twice from here."""
        client, now = self.client, self.shards
        if client is None or client.is_closed():
            return frozenset()
        launched = set(client.shards) if isinstance(client, discord.AutoShardedClient) else set()
        if shards <= now and (now - shards) <= launched:
            for shard in sorted(now - shards):
                await disconnect_shard(client, shard)
            self.shards = shards
            return shards
        tg = self._tg
        if tg is None and shards:  # stopping: connect nothing more
            return now
        if not self._connecting:  # never connected yet: it reads its shard ids when it does
            cast(discord.AutoShardedClient, client).shard_ids = sorted(shards)
        else:
            fresh = self._new_client(sorted(shards))
            try:
                with anyio.fail_after(RESHARD_LOGIN_TIMEOUT):
                    await log_in(fresh, self._settings.token)
            except _RESHARD_FAILURES as exc:
                log.warning("discord: could not restart the client for shards %s: %s", shards, exc)
                await close_client(fresh)
                return now
            log.info("discord: restarting the client with shards %s", sorted(shards))
            self.client = fresh
            self._connecting = False
            await close_client(client)
            client = fresh
        self.shards = shards
        if shards and tg is not None:
            self._connecting = True
            tg.start_soon(stay_connected, client)
        return shards

    async def close(self) -> None:
        if self.client is not None:
            with anyio.CancelScope(shield=True):
                await close_client(self.client)

    def is_ready(self) -> bool:
        """Connected, with the guilds loaded."""
        return self.client is not None and self.client.is_ready()

    @property
    def connected(self) -> bool:
        """With shard leases a replica holding no shard is connected once logged in: it is
        healthy, and sends what the bot asks of it."""
        client = self.client
        if self.leases is not None and not self.shards:
            return client is not None and client.user is not None and not client.is_closed()
        return self.is_ready()

    def channel(self, key: ConversationKey) -> discord.PartialMessageable:
        client = self.client
        if client is None or client.is_closed():
            raise SendFailed("the Discord client is not running", transient=False)
        return client.get_partial_messageable(int(key.chat))
