"""Discord's shards among replicas (issue 16): Discord adapters share one bot's 2 shards through
the fake gateway (tests/fakes/discord_api.py) and the cluster's named leases on a real Redis
(`SurfaceLeases` over `RedisCluster`, tests/store_backends.py's `redis_server`); each shard is
connected by the one replica holding `discord-shard:<application id>:<shard>`, and the shards
are rebalanced when a replica joins, stops or is cut off."""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from bot.cluster import SurfaceLeases
from bot.redis_cluster import RedisCluster
from bot.store import StoreError
from bot.store.redis import RedisStateStore
from config.settings import DiscordSettings
from surfaces.base import ChoiceAnswer, Inbound
from surfaces.discord.adapter import DiscordSurface
from surfaces.discord.shards import shard_lease_name, share_of
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import FakeDiscord, Guild

pytestmark = pytest.mark.anyio

TTL = 1.5
SHARDS = 2
_caller: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="")


class TaggedDiscord(FakeDiscord):
    """The fake Discord, its gateway also under `/replica/<name>/gateway`, so each IDENTIFY says
    which adapter sent it; and guilds placed on a chosen shard."""

    def __init__(self) -> None:
        super().__init__()
        self.identified: list[tuple[str, int]] = []  # (replica, shard), in order
        self._replica_of: dict[str, str] = {}  # gateway session id -> replica

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_get("/replica/{replica}/gateway", self._tagged_gateway)

    async def _tagged_gateway(self, request: web.Request) -> web.StreamResponse:
        _caller.set(request.match_info["replica"])  # this connection's task only
        return await self._gateway(request)

    def _identify(self, data: dict[str, Any], ws: Any, outbox: Any) -> Any:
        session = super()._identify(data, ws, outbox)
        if session is not None:
            self.identified.append((_caller.get(), session.shard[0]))
            self._replica_of[session.id] = _caller.get()
        return session

    def live_shards(self) -> dict[int, str]:
        """shard -> the replica whose gateway session for it is open now."""
        return {
            shard: self._replica_of.get(session.id, "")
            for shard, session in self._shard_sessions.items()
            if session.socket is not None and not session.socket.closed
        }

    def add_guild_on_shard(self, shard: int, name: str) -> Guild:
        """A guild whose id Discord routes to `shard` of SHARDS: `(id >> 22) % SHARDS`."""
        while (int(self.snowflake()) >> 22) % SHARDS != shard:
            self._ids = itertools.count(((int(self.snowflake()) >> 22) + 1) << 22)
        return self.add_guild(name)


class Replica:
    def __init__(self, name: str, store: RedisStateStore, surface: DiscordSurface) -> None:
        self.name = name
        self.store = store
        self.cluster = RedisCluster(store, name, TTL)
        self.surface = surface
        self.events: list[Inbound | ChoiceAnswer] = []
        self.scope = anyio.CancelScope()

    async def on_event(self, event: Inbound | ChoiceAnswer) -> None:
        self.events.append(event)

    def texts(self) -> list[str]:
        return [event.text for event in self.events if isinstance(event, Inbound)]

    async def heartbeat(self) -> None:
        """What the app's heartbeat does for `replicas()`; it stops when the store is gone."""
        try:
            while True:
                await self.cluster.beat([])
                await anyio.sleep(TTL / 3)
        except StoreError:
            return

    async def serve(self, *, task_status: Any) -> None:
        with self.scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.heartbeat)
                await tg.start(self.surface.run, self.on_event)
                task_status.started()

    async def leave(self) -> None:
        """A clean stop, as the app's: the surface stops, then the replica leaves the cluster."""
        self.scope.cancel()
        await self.surface.close()
        await self.cluster.aclose()


class World:
    def __init__(self, fake: TaggedDiscord) -> None:
        self.fake = fake
        self.alice = fake.user("Alice")
        self.guilds = [fake.add_guild_on_shard(shard, f"Guild {shard}") for shard in range(2)]
        for guild in self.guilds:
            fake.join(guild, self.alice)

    def say(self, shard: int, text: str) -> None:
        channel = self.guilds[shard].channel("general").id
        self.fake.post(channel, self.alice, text, mention=True)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    fake = TaggedDiscord()
    made = World(fake)
    await fake.start()
    try:
        yield made
    finally:
        await fake.close()


@asynccontextmanager
async def replicas(world: World, url: str, *names: str) -> AsyncIterator[list[Replica]]:
    fake = world.fake
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        made = []
        for name in names:
            store = RedisStateStore(url)
            stack.push_async_callback(store.aclose)
            settings = DiscordSettings(
                token=fake.token,
                api_url=fake.api_url,
                gateway_url=f"ws://127.0.0.1:{fake.port}/replica/{name}/gateway",
                allowed_users=[world.alice.id],
                shard_count=SHARDS,
            )
            surface = DiscordSurface(settings, min_edit_interval=0.1, guild_ready_timeout=0.05)
            stack.push_async_callback(surface.close)
            replica = Replica(name, store, surface)
            await replica.cluster.beat([])
            surface.set_leases(SurfaceLeases(replica.cluster))
            made.append(replica)
        for replica in made:
            await tg.start(replica.serve)
        yield made
        tg.cancel_scope.cancel()


def test_shard_i_goes_to_the_i_mod_n_th_sorted_replica() -> None:
    assert share_of("b", ["b", "a"], 4) == {1, 3}
    assert share_of("a", ["b", "a"], 4) == {0, 2}
    assert share_of("a", ["a"], 2) == {0, 1}
    assert share_of("c", ["a", "b"], 2) == set()  # counted as gone by the others
    assert share_of("c", ["a", "b", "c"], 2) == set()  # more replicas than shards
    assert shard_lease_name(42, 1) == "discord-shard:42:1"


async def test_a_joining_replica_takes_its_shard_and_takes_none_twice(
    world: World, redis_url: str
) -> None:
    fake = world.fake
    async with replicas(world, redis_url, "a") as [a]:
        await wait_for(lambda: fake.live_shards() == {0: "a", 1: "a"}, "a to connect both", 10)
        assert a.surface.shards == {0, 1}
        async with replicas(world, redis_url, "b") as [b]:
            await wait_for(
                lambda: fake.live_shards() == {0: "a", 1: "b"}, "the shards rebalanced", 10 * TTL
            )
            assert (a.surface.shards, b.surface.shards) == ({0}, {1})
            await wait_for(lambda: a.surface.connected and b.surface.connected, "both ready")
            world.say(0, "on shard zero")
            world.say(1, "on shard one")
            await wait_for(lambda: a.texts() == ["on shard zero"], "a's guild message")
            await wait_for(lambda: b.texts() == ["on shard one"], "b's guild message")

            await b.leave()
            await wait_for(
                lambda: fake.live_shards() == {0: "a", 1: "a"}, "a to take shard 1", 10 * TTL
            )
            world.say(1, "after b left")
            await wait_for(lambda: "after b left" in a.texts(), "a to receive on shard 1")
            assert b.texts() == ["on shard one"]
    # shard 1 moved a -> b -> a, each connection made once
    shard_one = [replica for replica, shard in fake.identified if shard == 1]
    assert shard_one == ["a", "b", "a"]


async def test_a_replica_cut_off_from_the_leases_loses_its_shard_to_the_other(
    world: World, redis_url: str
) -> None:
    fake = world.fake
    async with replicas(world, redis_url, "a", "b") as [a, b]:
        await wait_for(
            lambda: sorted(fake.live_shards().values()) == ["a", "b"], "one shard each", 10 * TTL
        )
        lost = next(shard for shard, owner in fake.live_shards().items() if owner == "b")
        await b.store.aclose()  # b can neither renew its shard nor beat: the others see it gone
        await wait_for(lambda: not b.surface.shards, "b to drop its shard", 5 * TTL)
        await wait_for(
            lambda: fake.live_shards() == {0: "a", 1: "a"}, "a to take both shards", 10 * TTL
        )
        world.say(lost, "after the hand-over")
        await wait_for(lambda: "after the hand-over" in a.texts(), "a to receive it")
        assert "after the hand-over" not in b.texts()
