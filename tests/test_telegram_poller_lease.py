"""Long polling among replicas (issue 16): two Telegram adapters share one bot through the fake
Bot API (tests/fakes/telegram_api.py) and the cluster's named leases on a real Redis
(`SurfaceLeases` over `RedisCluster`, tests/store_backends.py's `redis_server`); only the holder
of `telegram-poller:<bot id>` calls getUpdates, and a standby takes over when it goes."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from bot.cluster import SurfaceLeases
from bot.redis_cluster import RedisCluster
from bot.store.redis import RedisStateStore
from config.settings import TelegramSettings
from surfaces.base import ChoiceAnswer, Inbound
from surfaces.telegram.adapter import TelegramSurface
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_ID, FakeBotApi, People

pytestmark = pytest.mark.anyio

ALICE = People().alice
TTL = 1.5
FAST = {"min_edit_interval": 0.05, "poll_timeout": 2.0, "shutdown_timeout": 3.0}
LEASE = f"telegram-poller:{BOT_ID}"


class TaggedBotApi(FakeBotApi):
    """The fake Bot API, also under `/replica/<name>/`, so each call says which adapter made it."""

    def __init__(self) -> None:
        super().__init__()
        self.callers: list[tuple[str, str]] = []  # (replica, method), in arrival order

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_route("*", "/replica/{replica}/bot{token}/{method}", self._tagged)

    async def _tagged(self, request: web.Request) -> web.Response:
        self.callers.append((request.match_info["replica"], request.match_info["method"]))
        return await self._handle(request)

    def polls_by(self, replica: str) -> int:
        return self.callers.count((replica, "getUpdates"))


class CountingLeases:
    """The cluster's leases, counting the holds asked and the names used."""

    def __init__(self, inner: SurfaceLeases) -> None:
        self._inner = inner
        self.replica = inner.replica
        self.ttl = inner.ttl
        self.names: list[str] = []

    async def hold(self, name: str) -> bool:
        self.names.append(name)
        return await self._inner.hold(name)

    async def let_go(self, name: str) -> None:
        await self._inner.let_go(name)

    async def replicas(self) -> list[str]:
        return await self._inner.replicas()


class Replica:
    def __init__(self, name: str, store: RedisStateStore, surface: TelegramSurface) -> None:
        self.name = name
        self.store = store
        self.surface = surface
        self.leases = CountingLeases(SurfaceLeases(RedisCluster(store, name, TTL)))
        self.events: list[Inbound | ChoiceAnswer] = []
        self.scope = anyio.CancelScope()

    async def on_event(self, event: Inbound | ChoiceAnswer) -> None:
        self.events.append(event)

    def texts(self) -> list[str]:
        return [event.text for event in self.events if isinstance(event, Inbound)]


@pytest.fixture
async def api() -> AsyncIterator[TaggedBotApi]:
    async with TaggedBotApi() as fake:
        yield fake


@asynccontextmanager
async def replicas(api: TaggedBotApi, url: str, *names: str) -> AsyncIterator[list[Replica]]:
    """One Telegram adapter per name, each with its own store connection and leases, running in
    its own cancel scope (cancelling it is that replica's clean stop)."""
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        made = []
        for name in names:
            store = RedisStateStore(url)
            stack.push_async_callback(store.aclose)
            settings = TelegramSettings(
                token=api.token,
                api_url=f"{api.url}/replica/{name}",
                allowed_users=[str(ALICE.id)],
            )
            surface = TelegramSurface(settings, **FAST)  # type: ignore[arg-type]
            stack.push_async_callback(surface.close)
            replica = Replica(name, store, surface)
            await RedisCluster(store, name, TTL).beat([])  # alive, as the app's heartbeat makes it
            surface.set_leases(replica.leases)
            made.append(replica)

        async def serve(replica: Replica, *, task_status: Any) -> None:
            with replica.scope:
                await replica.surface.run(replica.on_event, task_status=task_status)

        for replica in made:
            await tg.start(serve, replica)
        yield made
        tg.cancel_scope.cancel()


async def test_only_the_lease_holder_polls_and_a_standby_takes_over_at_a_clean_stop(
    api: TaggedBotApi, redis_url: str
) -> None:
    async with replicas(api, redis_url, "a") as [a]:
        await wait_for(lambda: a.surface.polling and api.polls_by("a") > 0, "a to poll")
        async with replicas(api, redis_url, "b") as [b]:
            await wait_for(lambda: len(b.leases.names) >= 3, "b to try the lease a few times")
            assert api.polls_by("b") == 0 and not b.surface.polling
            assert b.surface.connected  # standing by is healthy: /readyz stays green
            api.dm(ALICE, "while a polls")
            await wait_for(lambda: a.texts() == ["while a polls"], "a to receive the message")

            a.scope.cancel()  # a's clean stop: polling stops, the lease is let go
            await wait_for(lambda: b.surface.polling, "b to start polling", 5 * TTL)
            api.dm(ALICE, "after the hand-over")
            await wait_for(lambda: b.texts() == ["after the hand-over"], "b to receive it")
            assert a.texts() == ["while a polls"]
            # a stopped polling before it let go: none of its polls comes after b's first
            first_b = api.callers.index(("b", "getUpdates"))
            assert ("a", "getUpdates") not in api.callers[first_b:]
    names = set(a.leases.names) | set(b.leases.names)
    assert names == {LEASE}
    assert api.token not in LEASE and api.token.split(":")[1] not in LEASE


async def test_a_poller_cut_off_from_the_leases_stops_and_the_standby_takes_over(
    api: TaggedBotApi, redis_url: str
) -> None:
    async with replicas(api, redis_url, "a", "b") as [a, b]:
        await wait_for(lambda: a.surface.polling or b.surface.polling, "one replica to poll")
        poller, standby = (a, b) if a.surface.polling else (b, a)
        await wait_for(lambda: len(standby.leases.names) >= 2, "the standby to try the lease")
        assert api.polls_by(standby.name) == 0

        await poller.store.aclose()  # its leases are unavailable from now on; it cannot renew
        api.dm(ALICE, "during the outage")
        await wait_for(lambda: not poller.surface.polling, "the poller to stop", 5 * TTL)
        await wait_for(lambda: standby.surface.polling, "the standby to poll", 5 * TTL)
        await wait_for(
            lambda: (poller.texts() + standby.texts()) == ["during the outage"],
            "the message to arrive",
        )
        api.dm(ALICE, "after")
        await wait_for(lambda: standby.texts()[-1:] == ["after"], "the standby to receive it")
        assert sorted(poller.texts() + standby.texts()) == ["after", "during the outage"]
        assert poller.surface.connected  # still signed in to the Bot API; it only stands by


async def test_without_leases_the_adapter_polls_as_a_single_process_does(
    api: TaggedBotApi,
) -> None:
    settings = TelegramSettings(
        token=api.token, api_url=f"{api.url}/replica/solo", allowed_users=[str(ALICE.id)]
    )
    surface = TelegramSurface(settings, **FAST)  # type: ignore[arg-type]
    got: list[Inbound | ChoiceAnswer] = []

    async def on_event(event: Inbound | ChoiceAnswer) -> None:
        got.append(event)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(surface.run, on_event)
            assert surface.polling
            api.dm(ALICE, "hello")
            await wait_for(lambda: len(got) == 1, "the message")
            tg.cancel_scope.cancel()
    finally:
        await surface.close()


async def test_in_webhook_mode_every_replica_receives_and_the_leases_are_unused(
    api: TaggedBotApi, redis_url: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    settings = TelegramSettings(
        token=api.token,
        api_url=f"{api.url}/replica/hooked",
        allowed_users=[str(ALICE.id)],
        webhook_url=f"http://127.0.0.1:{port}/telegram/hook",
        webhook_secret="right-secret_123",
        webhook_listen="127.0.0.1",
        webhook_port=port,
    )
    surface = TelegramSurface(settings, **FAST)  # type: ignore[arg-type]
    store = RedisStateStore(redis_url)
    leases = CountingLeases(SurfaceLeases(RedisCluster(store, "hooked", TTL)))
    surface.set_leases(leases)
    got: list[Inbound | ChoiceAnswer] = []

    async def on_event(event: Inbound | ChoiceAnswer) -> None:
        got.append(event)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(surface.run, on_event)
            update = api.take_update(api.dm(ALICE, "by webhook"))
            assert await api.post_webhook(update, secret="right-secret_123") == 200
            await wait_for(lambda: len(got) == 1, "the message")
            assert not surface.polling and surface.connected
            tg.cancel_scope.cancel()
    finally:
        await surface.close()
        await store.aclose()
    assert leases.names == [] and api.polls_by("hooked") == 0
