"""Replicas on one Redis (bot/cluster.py, bot/redis_cluster.py): leases and their fencing
tokens, the relay, adopting a dead replica's events; and two BotApps in one process on one
real Redis, as two replicas: an event that reaches the replica not serving its conversation is
answered by the one that does, in order, and an approval pressed on the other replica reaches
the agent. (Replicas as processes, killed mid-turn: tests/test_failover_*.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import redis

from bot.cluster import Lease, SurfaceLeases, conversation_lease, decode_event, encode_event
from bot.conversation import Binding
from bot.notices import SHUTDOWN_NOTE
from bot.redis_cluster import RedisCluster
from bot.store import DeliveryEntry, LeaseLost
from bot.store.redis import RedisStateStore
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, UserRef
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.test_engine import permission_outcomes, sends

SLOW = script({"chunk": "Working "}, {"sleep": 1.0}, {"chunk": "done."})

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

KEY = ConversationKey("telegram", "chat-9")


@asynccontextmanager
async def cluster(url: str, replica: str, ttl: float = 5.0) -> AsyncIterator[RedisCluster]:
    store = RedisStateStore(url)
    try:
        yield RedisCluster(store, replica, ttl)
    finally:
        await store.aclose()


async def test_a_lease_is_one_replicas_and_a_new_holder_gets_a_larger_token(
    redis_url: str,
) -> None:
    async with cluster(redis_url, "a") as a, cluster(redis_url, "b") as b:
        first = await a.acquire("conv:x")
        assert first == Lease("conv:x", 1, moved=False)
        assert await a.acquire("conv:x") == first  # renewed, the same token
        assert await b.acquire("conv:x") == "a"  # the holder's id
        await b.release(Lease("conv:x", 1))  # not b's: nothing happens
        assert await b.acquire("conv:x") == "a"
        await a.release(first)
        second = await b.acquire("conv:x")
        assert second == Lease("conv:x", 2, moved=True)  # it was a's before
        await b.release(second)
        assert await b.acquire("conv:x") == Lease("conv:x", 3, moved=False)


async def test_an_expired_lease_is_taken_over_and_its_old_holder_learns_it_lost_it(
    redis_url: str,
) -> None:
    async with cluster(redis_url, "a", ttl=1.0) as a, cluster(redis_url, "b", ttl=1.0) as b:
        held = await a.acquire("conv:x")
        assert isinstance(held, Lease)
        assert await a.beat([held]) == set()
        with anyio.fail_after(5):
            while not isinstance(taken := await b.acquire("conv:x"), Lease):
                await anyio.sleep(0.1)  # a stopped beating: its lease expires within the TTL
        assert taken.token > held.token and taken.moved
        assert await a.beat([held]) == {"conv:x"}  # lost, and not taken back by renewing


async def test_a_lease_that_only_expired_is_its_holders_again_and_its_writes_go_through(
    redis_url: str,
) -> None:
    """A Redis outage (or a pause) longer than the TTL: nobody took the lease meanwhile, so the
    holder's next heartbeat takes it again with the same token, and its writes are not refused."""
    store = RedisStateStore(redis_url)
    try:
        a = RedisCluster(store, "a", 1.0)
        name = conversation_lease(KEY)
        held = await a.acquire(name)
        assert isinstance(held, Lease)
        with redis.Redis.from_url(redis_url) as raw:
            raw.delete(f"switchboard:lease:{name}")  # as if it expired
        store.fence_of = lambda key: (name, str(held.token)) if key == KEY else None
        await store.put_binding(KEY, Binding("s-1", "kiro", "/w", "", 0))
        assert await a.beat([held]) == set()
        assert await RedisCluster(store, "b", 1.0).acquire(name) == "a"  # a's again
    finally:
        await store.aclose()


async def test_writes_under_a_lease_that_moved_are_refused(redis_url: str) -> None:
    store = RedisStateStore(redis_url)
    try:
        a, b = RedisCluster(store, "a", 1.0), RedisCluster(store, "b", 1.0)
        name = conversation_lease(KEY)
        held = await a.acquire(name)
        assert isinstance(held, Lease)
        store.fence_of = lambda key: (name, str(held.token)) if key == KEY else None
        binding = Binding("s-1", "kiro", "/w", "", 0)
        await store.put_binding(KEY, binding)  # a holds it: written
        with anyio.fail_after(5):
            while not isinstance(await b.acquire(name), Lease):
                await anyio.sleep(0.1)
        with pytest.raises(LeaseLost) as lost:
            await store.put_binding(KEY, Binding("s-2", "kiro", "/w", "", 1))
        assert lost.value.key == KEY
        with pytest.raises(LeaseLost):
            await store.ledger_put(DeliveryEntry("e-1", KEY, "late", 0.0, replica="a"))
        assert await store.get_binding(KEY) == binding  # what b sees was not overwritten
        assert await store.ledger_pending() == []
        other = ConversationKey("telegram", "other")
        await store.put_binding(other, binding)  # no lease held for it here: not fenced
        assert await store.get_binding(other) == binding
    finally:
        await store.aclose()


async def test_events_are_relayed_only_to_a_live_replica_and_a_dead_ones_are_adopted_once(
    redis_url: str,
) -> None:
    async with (
        cluster(redis_url, "a", ttl=1.0) as a,
        cluster(redis_url, "b", ttl=1.0) as b,
        cluster(redis_url, "c", ttl=1.0) as c,
    ):
        assert not await b.relay("a", "never seen")  # a has not beaten: not alive
        await a.beat([])
        assert await a.alive() == ["a"]
        assert await b.relay("a", "one") and await b.relay("a", "two")
        assert await a.relayed(0.1) == ["one", "two"]
        assert await a.relayed(0.1) == []
        assert await b.relay("a", "left behind")
        await b.beat([])
        await c.beat([])
        with anyio.fail_after(5):
            while await b.dead_replicas() != ["a"]:
                await anyio.sleep(0.1)
                await b.beat([])
                await c.beat([])
        assert not await c.relay("a", "too late")
        assert await b.adopt("a") == ["left behind"]
        assert await c.adopt("a") == []  # adopted once
        assert await b.alive() == ["b", "c"]


async def test_surface_leases_are_one_replicas_at_a_time(redis_url: str) -> None:
    async with cluster(redis_url, "a") as a, cluster(redis_url, "b") as b:
        first, second = SurfaceLeases(a), SurfaceLeases(b)
        assert await first.hold("telegram-poller:1")
        assert not await second.hold("telegram-poller:1")
        await first.let_go("telegram-poller:1")
        assert await second.hold("telegram-poller:1")
        await a.beat([])
        await b.beat([])
        assert await first.replicas() == ["a", "b"]


def test_a_relayed_event_reads_back_as_it_was_and_anything_else_is_dropped() -> None:
    message = Inbound(KEY, UserRef("alice", "Alice"), "hi: there", "ev-1")
    relayed = decode_event(encode_event(message, 1))
    assert relayed is not None and relayed.event == message and relayed.hops == 1
    press = ChoiceAnswer(KEY, UserRef("carol"), "tok", "ev-2")
    again = decode_event(encode_event(press, 2))
    assert again is not None and again.event == press
    for bad in ("", "[]", '{"type": "message"}', '{"type": "x", "key": [1, 2, 3]}', "{"):
        assert decode_event(bad) is None


# ---- two BotApps on one Redis -------------------------------------------------------------------
async def test_a_message_reaching_the_other_replica_is_answered_by_the_one_serving_it(
    tmp_path: Path, fake_agent: FakeAgent, redis_url: str
) -> None:
    here, there = ScriptedSurface(), ScriptedSurface()
    settings_a = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="a")
    settings_b = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="b")
    async with running_app(settings_a, here) as a, running_app(settings_b, there) as b:
        slow = here.message("alice", SLOW, event_id="u-1")
        first = here.post(slow)
        await wait_for(lambda: here.ops("send"), "the first reply to start")
        second = there.post(there.message("alice", "hello", event_id="u-2"))
        await finished(second)  # b handed it on at once
        await finished(first)
        await wait_for(lambda: sends(here, "Echo: hello"), "the relayed message's reply")
        again = there.post(there.message("alice", "hello", event_id="u-2"))
        await finished(again)  # a redelivery, on either replica: dropped
        relayed = "switchboard_events_relayed_total"
        assert b.metrics.registry.get_sample_value(relayed) == 1.0
        assert a.metrics.registry.get_sample_value(relayed) == 0.0
    assert there.ops("send", "edit") == []  # b said nothing in a's conversation
    assert [c.text for c in here.ops("send") if "Echo: hello" in c.text] == ["Echo: hello"]
    assert len(fake_agent.frames_in("session/prompt")) == 2


async def test_an_approval_pressed_on_the_other_replica_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent, redis_url: str
) -> None:
    here, there = ScriptedSurface(), ScriptedSurface()
    settings_a = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="a")
    settings_b = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="b")
    async with running_app(settings_a, here), running_app(settings_b, there):
        turn = here.post(here.message("alice", "SCN_PERMISSION", event_id="u-1"))
        await wait_for(here.choices, "the approval prompt")
        token = next(c.token for c in here.choices()[0].choices if c.label == "Yes")
        await finished(there.post(there.press("alice", token, event_id="p-1", key=CHAT)))
        await finished(turn)
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    assert [c.text for c in here.ops("close_choice")] == ["Answered: Yes"]
    assert there.ops("send", "edit", "close_choice") == []


async def test_a_replica_that_lost_its_lease_stops_its_turn_and_writes_nothing_more(
    tmp_path: Path, fake_agent: FakeAgent, redis_url: str
) -> None:
    """Another replica took the conversation while a turn ran here (a pause past the TTL): the
    heartbeat notices, the turn is stopped, and its last words (the partial reply with the
    stopping note) are refused by the store, so nothing is delivered over the new holder."""
    here = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="a", lease_ttl=1.0)
    async with running_app(settings, here) as a:
        turn = here.post(
            here.message("alice", script({"chunk": "working "}, {"hang": True}), event_id="u-1")
        )
        await wait_for(lambda: sends(here, "working"), "the reply to start")
        thief = RedisStateStore(redis_url)
        try:
            name = conversation_lease(CHAT)
            with redis.Redis.from_url(redis_url) as raw:
                raw.delete(f"switchboard:lease:{name}")  # a's lease lapsed
            taken = await RedisCluster(thief, "b", 30.0).acquire(name)
            assert isinstance(taken, Lease) and taken.moved
            await finished(turn)
            assert await thief.ledger_pending() == []
            assert await thief.journal_open_turns() == []
        finally:
            await thief.aclose()
        lost = a.metrics.registry.get_sample_value("switchboard_leases_lost_total")
        assert lost == 1.0
    assert not sends(here, SHUTDOWN_NOTE)
    assert not sends(here, "stopped")
