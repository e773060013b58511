"""Redis unavailable (issue 16): the Redis store against a real redis-server of the test's own
that is stopped and restarted on the same port (with an append-only file, so what was written
before survives, as on a real deployment) or paused, and `OutageTolerantStore` around it: the
writes of a finishing turn never fail and reach Redis once when it is back, new work waits a
bounded time and then fails with `StoreUnavailable` (one sentence for the person), and the same
store object works again after the restart. Then the same through a running BotApp."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import stamina

import bot.store.kept_writes
import bot.store.redis_connection
from bot.access import AccessPolicy
from bot.app import BotApp
from bot.faults import STORE_UNAVAILABLE, fault_sentence
from bot.store import DeliveryEntry, JournalEntry, OutageTolerantStore, StoreUnavailable, open_store
from bot.store.redis import RedisStateStore
from config import load_settings
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, wait_for
from tests.store_backends import RedisProcess

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

KEY = ConversationKey("telegram", "chat-1")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisProcess]:
    own = RedisProcess(tmp_path, persistent=True)
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def no_backoff() -> Iterator[None]:
    """stamina's test mode, for tests whose point is not the waiting: a call the store does not
    answer is tried once more at once, then given up on."""
    with stamina.set_testing(True):
        yield


def entry(entry_id: str, text: str = "the answer") -> DeliveryEntry:
    return DeliveryEntry(entry_id, KEY, text, time.time())


def wrapped(server: RedisProcess, wait: float = 0.5) -> OutageTolerantStore:
    return OutageTolerantStore(RedisStateStore(server.url), wait=wait)


async def test_a_finishing_turns_ledger_writes_return_during_an_outage_and_land_once_after(
    server: RedisProcess,
) -> None:
    store = wrapped(server, wait=300)  # past the per-test timeout: an ending write must not wait
    try:
        await store.journal_open(JournalEntry("turn-1", KEY, "alice", time.time()), 3600)
        await store.journal_open(JournalEntry("turn-2", KEY, "alice", time.time()), 3600)
        server.stop()
        # What finish_reply does: a delivered reply, then one the surface did not take.
        await store.ledger_put(entry("e-1"), closes_turn="turn-1")
        await store.ledger_done("e-1")
        await store.ledger_put(entry("e-2", "cut off"), closes_turn="turn-2")
        await store.ledger_attempted("e-2")
        assert store.kept == 4
        server.start()
        pending = await store.ledger_pending()  # the first answered call writes what is kept
        assert store.kept == 0
        assert [(e.entry_id, e.text, e.attempts) for e in pending] == [("e-2", "cut off", 1)]
        assert await store.journal_open_turns() == []
        with server.raw() as raw:
            assert sorted(raw.hkeys("switchboard:ledger")) == ["e-2"]
            assert raw.hlen("switchboard:journal") == 0
    finally:
        await store.aclose()


async def test_reads_of_the_ledger_count_what_is_kept_before_it_is_written(
    server: RedisProcess,
) -> None:
    store = wrapped(server)
    try:
        await store.journal_open(JournalEntry("turn-1", KEY, "alice", time.time()), 3600)
        server.stop()
        await store.ledger_put(entry("e-1"), closes_turn="turn-1")
        server.start()
        # As while another task writes them: the read must not wait for it.
        store.kept_writes._flushing = True
        try:
            assert [e.entry_id for e in await store.ledger_pending()] == ["e-1"]
            assert await store.journal_open_turns() == []
        finally:
            store.kept_writes._flushing = False
        with server.raw() as raw:
            assert raw.hlen("switchboard:ledger") == 0  # not yet written: the view was the overlay
    finally:
        await store.aclose()


async def test_run_writes_what_is_kept_as_soon_as_redis_is_back(server: RedisProcess) -> None:
    store = wrapped(server)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run)
            await store.check_writable()
            server.stop()
            await store.ledger_put(entry("e-1"))
            await anyio.sleep(0.2)  # run() meets the outage a few times
            server.start()
            await wait_for(lambda: store.kept == 0, "run() to write the kept ledger entry")
            tg.cancel_scope.cancel()
        with server.raw() as raw:
            assert raw.hkeys("switchboard:ledger") == ["e-1"]
    finally:
        await store.aclose()


async def test_a_claim_during_an_outage_waits_and_then_raises_store_unavailable(
    server: RedisProcess,
) -> None:
    store = wrapped(server, wait=0.3)
    try:
        assert await store.claim_event("telegram:1", 60)
        server.stop()
        started = anyio.current_time()
        with pytest.raises(StoreUnavailable) as raised:
            await store.claim_event("telegram:2", 60)
        assert anyio.current_time() - started >= 0.3  # it waited before giving up
        assert raised.value.location == server.url
        assert "waited 0.3 s" in raised.value.reason
        assert fault_sentence(raised.value) == STORE_UNAVAILABLE
        server.start()
        assert await store.claim_event("telegram:2", 60)
        assert not await store.claim_event("telegram:1", 60)  # the append-only file kept it
    finally:
        await store.aclose()


async def test_a_claim_that_redis_answers_within_the_wait_succeeds(server: RedisProcess) -> None:
    store = wrapped(server, wait=30)
    try:
        server.stop()
        async with anyio.create_task_group() as tg:

            async def come_back() -> None:
                await anyio.sleep(0.3)
                server.start()

            tg.start_soon(come_back)
            assert await store.claim_event("telegram:1", 60)
    finally:
        await store.aclose()


class _AnswerLostOnce(RedisStateStore):
    """Redis runs the first claim, and its answer is lost on the way back (a reply cut off by
    a reset connection): what the outage wrapper retries after."""

    lost = False

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        won = await super().claim_event(event_key, ttl, claimant=claimant)
        if not self.lost:
            self.lost = True
            raise StoreUnavailable(self.location, "the answer was lost")
        return won


@pytest.mark.usefixtures("no_backoff")
async def test_a_claim_whose_answer_was_lost_is_won_by_its_retry_not_dropped(
    server: RedisProcess,
) -> None:
    store = OutageTolerantStore(_AnswerLostOnce(server.url), wait=5)
    try:
        assert await store.claim_event("telegram:9", 60)  # the retry sees its own claim
        assert not await store.claim_event("telegram:9", 60)  # a real redelivery is refused
    finally:
        await store.aclose()


async def test_the_redis_store_reconnects_by_itself_after_a_restart(server: RedisProcess) -> None:
    store = RedisStateStore(server.url)  # unwrapped: redis-py's own reconnecting
    try:
        await store.put_place(KEY, "alpha")
        server.stop()
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            await store.get_place(KEY)
        server.start()
        assert await store.get_place(KEY) == "alpha"
        await store.ledger_put(entry("e-1"))
        assert [e.entry_id for e in await store.ledger_pending()] == ["e-1"]
        assert await store.claim_event("telegram:9", 60)
        await store.check_writable()
    finally:
        await store.aclose()


async def test_a_silent_redis_is_given_up_on_after_the_bounded_timeout(
    server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bot.store.redis_connection, "TIMEOUT", 0.3)
    store = RedisStateStore(server.url)
    try:
        await store.check_writable()
        server.pause()
        try:
            with pytest.raises(StoreUnavailable, match=r"no answer within 0\.3 s"):
                await store.get_place(KEY)
        finally:
            server.resume()
        assert await store.get_place(KEY) is None
    finally:
        await store.aclose()


async def test_kept_writes_are_bounded_and_the_oldest_is_dropped_with_an_error_line(
    server: RedisProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(bot.store.kept_writes, "KEEP_LIMIT", 3)
    caplog.set_level(logging.WARNING, logger="bot.store.kept_writes")
    store = wrapped(server)
    try:
        server.stop()
        for n in range(5):
            await store.ledger_put(entry(f"e-{n}"))
        assert store.kept == 3
        dropped = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert [("e-0" in r.getMessage(), "e-1" in r.getMessage()) for r in dropped] == [
            (True, False),
            (False, True),
        ]
        server.start()
        assert [e.entry_id for e in await store.ledger_pending()] == ["e-2", "e-3", "e-4"]
    finally:
        await store.aclose()


async def test_what_is_still_kept_at_shutdown_is_named_in_an_error_line(
    server: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="bot.store.kept_writes")
    store = wrapped(server)
    server.stop()
    await store.ledger_put(entry("e-1"))
    await store.aclose()
    lost = [r.getMessage() for r in caplog.records]
    assert len(lost) == 1
    assert "1 kept ledger writes are lost" in lost[0]
    assert "ledger_put e-1" in lost[0]


def test_state_wait_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().state_wait == 10
    monkeypatch.setenv("SWITCHBOARD_STATE_WAIT", "2.5")
    assert load_settings().state_wait == 2.5


@pytest.mark.usefixtures("no_backoff")
async def test_in_stamina_test_mode_a_call_during_an_outage_fails_at_once(
    server: RedisProcess,
) -> None:
    store = wrapped(server, wait=300)  # past the per-test timeout: only the test mode ends it
    try:
        server.stop()
        with pytest.raises(StoreUnavailable, match="waited 300 s"):
            await store.get_place(KEY)
    finally:
        await store.aclose()


def test_open_store_wraps_redis_with_the_wait_it_is_given() -> None:
    store = open_store("redis://127.0.0.1:1/0", wait=2.5)
    assert isinstance(store, OutageTolerantStore)
    assert isinstance(store.inner, RedisStateStore)
    assert store.wait == 2.5


# ---- through the engine -------------------------------------------------------------------------

SLOW_TURN = script({"chunk": "working "}, {"sleep": 1.5}, {"chunk": "done"})


@pytest.mark.usefixtures("no_backoff")
async def test_a_turn_finishes_through_an_outage_and_a_message_while_down_gets_one_sentence(
    server: RedisProcess, tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    settings = engine_settings(tmp_path, fake_agent, state=server.url, state_wait=0.5)
    store = open_store(settings.state, wait=settings.state_wait)
    assert isinstance(store, OutageTolerantStore)
    surface = ScriptedSurface()
    app = BotApp(settings, store, AccessPolicy.from_settings(settings))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await app.serve([surface], stop, task_status=task_status)

            await tg.start(serve)
            try:
                turn = surface.post(surface.message("alice", SLOW_TURN))
                await wait_for(lambda: "working" in surface.transcript(), "the turn to stream")
                server.stop()
                await finished(turn)
                assert "working done" in surface.transcript()  # the final reply was delivered
                await finished(surface.post(surface.message("bob", "hello while down")))
                assert STORE_UNAVAILABLE in surface.transcript()
                assert "Echo: hello while down" not in surface.transcript()
                server.start()
                assert await store.ledger_pending() == []
                assert store.kept == 0
                await finished(surface.post(surface.message("alice", "hello again")))
                assert "Echo: hello again" in surface.transcript()
            finally:
                stop.set()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    with server.raw() as raw:
        assert raw.hlen("switchboard:ledger") == 0
        assert raw.hlen("switchboard:journal") == 0
    assert fake_agent.prompt_texts().count(SLOW_TURN) == 1
    assert surface.transcript().count("working done") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
