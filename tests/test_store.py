"""The state store: bindings, de-duplication, one-time approvals, the delivery ledger, and what
survives a restart or a crash. The protocol's tests run against every backend (`backend`, from
tests/store_backends.py: the SQLite file and a real Redis server); what looks under a backend
(SQLite's tables, Redis' keys) runs against that one only."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bot.conversation import Binding, ConversationKey
from bot.store import (
    ApprovalRecord,
    BackgroundWriter,
    DeliveryEntry,
    FencedStore,
    JournalEntry,
    OutageTolerantStore,
    ScriptingStore,
    SqliteStateStore,
    StateStore,
    StoreError,
    StoreWrapper,
    inner_store,
    open_store,
)
from bot.store.redis import RedisStateStore
from bot.store.redis_connection import PREFIX, redacted_url
from bot.store.sqlite import PURGE_INTERVAL
from config import ConfigError
from tests.harness.clock import FakeClock
from tests.store_backends import Backend

ROOT = Path(__file__).resolve().parent.parent
KEY = ConversationKey("telegram", "42", "7")
OTHER = ConversationKey("slack", "C1")
BINDING = Binding("sess-1", "kiro", "/work/ws", model="m1", generation=3)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
async def store(backend: Backend, clock: FakeClock) -> AsyncIterator[StateStore]:
    s = backend.open(clock)
    yield s
    await s.aclose()


@pytest.fixture
async def sqlite_store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStateStore]:
    """For the tests that look into SQLite's tables."""
    s = SqliteStateStore(tmp_path / "state.db", clock=clock)
    yield s
    await s.aclose()


def approvals(group: str, *tokens: str) -> list[ApprovalRecord]:
    return [ApprovalRecord(t, group, f"opt-{t}", "u1", KEY, 100.0) for t in tokens]


# -- bindings --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_binding_round_trips_and_is_keyed_by_the_whole_conversation_key(
    store: StateStore,
) -> None:
    assert await store.get_binding(KEY) is None
    await store.put_binding(KEY, BINDING)
    assert await store.get_binding(KEY) == BINDING
    assert await store.get_binding(ConversationKey("telegram", "42")) is None
    await store.put_binding(KEY, BINDING.with_model("m2"))
    assert await store.get_binding(KEY) == BINDING.with_model("m2")
    await store.delete_binding(KEY)
    assert await store.get_binding(KEY) is None


@pytest.mark.anyio
async def test_bindings_and_pending_deliveries_survive_reopening_the_store(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "nested" / "dirs" / "state.db"
    if backend.path is not None:
        backend = Backend(backend.name, str(path), path)
    first = backend.open()
    await first.put_binding(KEY, BINDING)
    await first.ledger_put(DeliveryEntry("e1", KEY, "final answer", 5.0))
    await first.aclose()
    assert backend.path is None or path.is_file()

    second = backend.open()
    try:
        assert await second.get_binding(KEY) == BINDING
        assert await second.ledger_pending() == [DeliveryEntry("e1", KEY, "final answer", 5.0)]
    finally:
        await second.aclose()


@pytest.mark.anyio
async def test_a_commit_survives_the_writer_being_killed(backend: Backend) -> None:
    writer = textwrap.dedent(
        f"""
        import sys, time, anyio
        from bot.conversation import Binding, ConversationKey
        from bot.store import open_store

        async def main():
            store = open_store({backend.location!r})
            await store.put_binding(ConversationKey("telegram", "42", "7"), Binding("sess-1", "kiro", "/work/ws", "m1", 3))
            print("written", flush=True)
            time.sleep(60)  # killed here, connection never closed

        anyio.run(main)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", writer]
    async with await anyio.open_process(command, stdout=subprocess.PIPE, cwd=ROOT, env=env) as proc:
        assert proc.stdout is not None
        output = b""
        with anyio.fail_after(30):
            while b"written\n" not in output:
                output += await proc.stdout.receive()
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL

    survivor = backend.open()
    try:
        assert await survivor.get_binding(KEY) == BINDING
    finally:
        await survivor.aclose()


# -- de-duplication --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_event_is_claimed_once_and_a_redelivery_is_refused_until_the_ttl_expires(
    store: StateStore, clock: FakeClock
) -> None:
    assert await store.claim_event("tg:update:1", ttl=10) is True
    assert await store.claim_event("tg:update:1", ttl=10) is False
    assert await store.claim_event("tg:update:2", ttl=10) is True
    clock.advance(9.9)
    assert await store.claim_event("tg:update:1", ttl=10) is False
    clock.advance(0.1)
    assert await store.claim_event("tg:update:1", ttl=10) is True
    assert await store.claim_event("tg:update:1", ttl=10) is False


@pytest.mark.anyio
async def test_a_claim_retried_by_its_claimant_is_won_again_and_anyone_elses_is_refused(
    store: StateStore, clock: FakeClock
) -> None:
    """A claim whose answer was lost (a Redis reply that never arrived) is retried: the same
    claimant wins it again instead of taking its own claim for a redelivery."""
    assert await store.claim_event("tg:update:7", ttl=10, claimant="c-1") is True
    assert await store.claim_event("tg:update:7", ttl=10, claimant="c-1") is True
    assert await store.claim_event("tg:update:7", ttl=10, claimant="c-2") is False
    assert await store.claim_event("tg:update:7", ttl=10) is False
    clock.advance(10)
    assert await store.claim_event("tg:update:7", ttl=10, claimant="c-2") is True
    assert await store.claim_event("tg:update:7", ttl=10, claimant="c-1") is False


@pytest.mark.anyio
async def test_fifty_concurrent_claims_of_one_key_yield_exactly_one_winner(
    store: StateStore,
) -> None:
    results: list[bool] = []

    async def claim() -> None:
        results.append(await store.claim_event("slack:evt:Ev1", ttl=60))

    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(claim)
    assert len(results) == 50
    assert results.count(True) == 1


@pytest.mark.anyio
async def test_expired_keys_and_approvals_are_purged_lazily(
    sqlite_store: SqliteStateStore, clock: FakeClock, tmp_path: Path
) -> None:
    store = sqlite_store
    await store.claim_event("old", ttl=1)
    await store.put_approvals(approvals("g1", "t1"), ttl=1)
    clock.advance(PURGE_INTERVAL + 1)
    await store.claim_event("new", ttl=1000)

    with sqlite3.connect(tmp_path / "state.db") as raw:
        events = raw.execute("SELECT event_key FROM events").fetchall()
        tokens = raw.execute("SELECT token FROM approvals").fetchall()
    raw.close()
    assert events == [("new",)]
    assert tokens == []


# -- approvals -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_taking_a_token_consumes_its_whole_group_once(store: StateStore) -> None:
    await store.put_approvals(approvals("req-1", "allow", "always", "reject"), ttl=300)
    await store.put_approvals(approvals("req-2", "other"), ttl=300)

    taken = await store.take_approval("always")
    assert taken == ApprovalRecord("always", "req-1", "opt-always", "u1", KEY, 100.0)
    assert await store.take_approval("always") is None
    assert await store.take_approval("allow") is None
    assert await store.take_approval("reject") is None
    assert await store.take_approval("unknown") is None
    assert await store.take_approval("other") is not None


@pytest.mark.anyio
async def test_concurrent_takes_in_one_group_have_exactly_one_winner(
    store: StateStore,
) -> None:
    tokens = [f"t{i}" for i in range(20)]
    await store.put_approvals(approvals("req", *tokens), ttl=300)
    won: list[ApprovalRecord] = []

    async def take(token: str) -> None:
        if (record := await store.take_approval(token)) is not None:
            won.append(record)

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(take, token)
    assert len(won) == 1


@pytest.mark.anyio
async def test_an_expired_or_dropped_approval_cannot_be_taken(
    store: StateStore, clock: FakeClock
) -> None:
    await store.put_approvals(approvals("req-1", "a", "b"), ttl=30)
    await store.put_approvals(approvals("req-2", "c"), ttl=300)
    clock.advance(30)
    assert await store.take_approval("a") is None
    await store.drop_approvals("req-2")
    assert await store.take_approval("c") is None


# -- delivery ledger -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_ledger_lists_pending_entries_oldest_first_and_counts_attempts(
    store: StateStore,
) -> None:
    await store.ledger_put(DeliveryEntry("late", KEY, "second", created=20.0))
    await store.ledger_put(DeliveryEntry("early", OTHER, "first", created=10.0))
    pending = await store.ledger_pending()
    assert [e.entry_id for e in pending] == ["early", "late"]
    assert pending[0] == DeliveryEntry("early", OTHER, "first", 10.0, attempts=0)

    await store.ledger_attempted("late")
    await store.ledger_attempted("late")
    await store.ledger_attempted("missing")  # a no-op, not an error
    assert (await store.ledger_pending())[1].attempts == 2

    await store.ledger_done("early")
    await store.ledger_done("early")
    assert [e.entry_id for e in await store.ledger_pending()] == ["late"]


@pytest.mark.anyio
async def test_an_entry_written_again_keeps_its_place_among_entries_of_the_same_time(
    store: StateStore,
) -> None:
    await store.ledger_put(DeliveryEntry("a", KEY, "first", created=10.0))
    await store.ledger_put(DeliveryEntry("b", KEY, "second", created=10.0))
    await store.ledger_put(DeliveryEntry("a", KEY, "first, again", created=10.0, attempts=1))
    pending = await store.ledger_pending()
    assert [(e.entry_id, e.text, e.attempts) for e in pending] == [
        ("a", "first, again", 1),
        ("b", "second", 0),
    ]


# -- turn journal ----------------------------------------------------------------------------

WEEK = 7 * 24 * 3600.0


def turn(turn_id: str, key: ConversationKey = KEY, started: float = 100.0) -> JournalEntry:
    return JournalEntry(turn_id, key, "u1", started)


@pytest.mark.anyio
async def test_the_journal_lists_open_turns_oldest_first_until_each_is_closed(
    store: StateStore,
) -> None:
    assert await store.journal_open_turns() == []
    await store.journal_open(turn("late", started=200.0), WEEK)
    await store.journal_open(turn("early", OTHER, started=100.0), WEEK)
    assert await store.journal_open_turns() == [
        turn("early", OTHER, 100.0),
        turn("late", KEY, 200.0),
    ]

    await store.journal_close("early")
    await store.journal_close("early")
    await store.journal_close("missing")  # a no-op, not an error
    assert await store.journal_open_turns() == [turn("late", KEY, 200.0)]


@pytest.mark.anyio
async def test_a_final_text_entering_the_ledger_closes_its_turn_in_the_same_write(
    store: StateStore,
) -> None:
    await store.journal_open(turn("t1"), WEEK)
    await store.journal_open(turn("t2", OTHER), WEEK)
    await store.ledger_put(DeliveryEntry("notice", KEY, "a notice, not the final", 5.0))
    assert [t.turn_id for t in await store.journal_open_turns()] == ["t1", "t2"]

    await store.ledger_put(DeliveryEntry("final", KEY, "the answer", 6.0), closes_turn="t1")
    assert [t.turn_id for t in await store.journal_open_turns()] == ["t2"]
    assert [e.entry_id for e in await store.ledger_pending()] == ["notice", "final"]


@pytest.mark.anyio
async def test_a_failed_ledger_write_leaves_its_turn_open(
    store: StateStore, backend: Backend
) -> None:
    await store.journal_open(turn("t1"), WEEK)
    if backend.path is not None:
        with sqlite3.connect(backend.path) as raw:  # another writer breaks the ledger
            raw.execute("DROP TABLE ledger")
        raw.close()
    else:
        with backend.raw() as client:  # a ledger of the wrong type: HSET fails
            client.set(f"{PREFIX}ledger", "not a hash")
    with pytest.raises(StoreError):
        await store.ledger_put(DeliveryEntry("final", KEY, "the answer", 6.0), closes_turn="t1")
    assert [t.turn_id for t in await store.journal_open_turns()] == ["t1"]


@pytest.mark.anyio
async def test_an_open_turn_expires_after_its_ttl_and_is_purged(
    store: StateStore, clock: FakeClock, backend: Backend
) -> None:
    await store.journal_open(turn("old"), ttl=WEEK)
    clock.advance(WEEK - 1)
    assert [t.turn_id for t in await store.journal_open_turns()] == ["old"]
    clock.advance(1)
    assert await store.journal_open_turns() == []

    clock.advance(PURGE_INTERVAL)
    await store.journal_open(turn("new"), ttl=WEEK)
    if backend.path is not None:
        with sqlite3.connect(backend.path) as raw:
            rows = [row[0] for row in raw.execute("SELECT turn_id FROM journal")]
        raw.close()
    else:
        with backend.raw() as client:
            rows = list(client.hkeys(f"{PREFIX}journal"))
    assert rows == ["new"]


@pytest.mark.anyio
async def test_opening_a_turn_drops_expired_ones_and_closed_turns_leave_no_trace(
    store: StateStore, clock: FakeClock, backend: Backend
) -> None:
    await store.journal_open(turn("old"), ttl=10)
    await store.journal_open(turn("closed", OTHER), ttl=WEEK)
    await store.journal_close("closed")
    await store.journal_open(turn("answered", OTHER), ttl=WEEK)
    await store.ledger_put(DeliveryEntry("e-9", OTHER, "done", 1.0), closes_turn="answered")
    clock.advance(PURGE_INTERVAL)  # past "old"'s 10 s, and the SQLite store's purge interval
    await store.journal_open(turn("new"), ttl=WEEK)  # no read of the journal in between
    if backend.path is not None:
        with sqlite3.connect(backend.path) as raw:
            rows = [row[0] for row in raw.execute("SELECT turn_id FROM journal")]
        raw.close()
    else:
        with backend.raw() as client:
            rows = list(client.hkeys(f"{PREFIX}journal"))
            assert client.zrange(f"{PREFIX}journal:expiry", 0, -1) == ["new"]
    assert rows == ["new"]


# The tables of the previous version (stop 7), which had no journal.
PREVIOUS_SCHEMA = """
CREATE TABLE bindings (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    session_id TEXT NOT NULL, backend TEXT NOT NULL, workspace TEXT NOT NULL,
    model TEXT NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (surface, chat, thread)
);
CREATE TABLE events (event_key TEXT PRIMARY KEY, expires REAL NOT NULL);
CREATE TABLE approvals (
    token TEXT PRIMARY KEY, grp TEXT NOT NULL, option_id TEXT NOT NULL, requester TEXT NOT NULL,
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL
);
CREATE INDEX approvals_by_group ON approvals (grp);
CREATE TABLE ledger (
    entry_id TEXT PRIMARY KEY, surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    text TEXT NOT NULL, created REAL NOT NULL, attempts INTEGER NOT NULL
);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO bindings VALUES ('telegram', '42', '7', 'sess-1', 'kiro', '/work/ws', 'm1', 3);
INSERT INTO ledger VALUES ('e1', 'telegram', '42', '7', 'final answer', 5.0, 1);
"""


@pytest.mark.anyio
async def test_a_state_file_of_the_previous_version_opens_keeps_its_data_and_gains_a_journal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(PREVIOUS_SCHEMA)
    raw.close()

    store = SqliteStateStore(path)
    try:
        assert await store.get_binding(KEY) == BINDING
        assert await store.ledger_pending() == [DeliveryEntry("e1", KEY, "final answer", 5.0, 1)]
        assert await store.journal_open_turns() == []
        await store.journal_open(turn("t1"), WEEK)
    finally:
        await store.aclose()

    reopened = SqliteStateStore(path)
    try:
        assert await reopened.journal_open_turns() == [turn("t1")]
    finally:
        await reopened.aclose()


# -- health, errors, opening -----------------------------------------------------------------


@pytest.mark.anyio
async def test_check_writable_passes_for_a_usable_file(store: StateStore) -> None:
    await store.check_writable()


@pytest.mark.anyio
async def test_check_writable_raises_store_error_when_the_parent_is_a_file(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    location = str(blocker / "state.db")
    store = SqliteStateStore(location)
    try:
        with pytest.raises(StoreError) as caught:
            await store.check_writable()
    finally:
        await store.aclose()
    assert caught.value.location == location
    assert caught.value.reason
    assert str(caught.value).startswith(f"The state store at {location} cannot be used: ")
    assert isinstance(caught.value.__cause__, OSError | sqlite3.Error)


@pytest.mark.anyio
async def test_a_closed_store_refuses_further_calls(store: StateStore) -> None:
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.get_binding(KEY)


@pytest.mark.anyio
async def test_open_store_accepts_a_path_a_sqlite_url_and_memory(tmp_path: Path) -> None:
    for location, file in [
        (str(tmp_path / "a.db"), tmp_path / "a.db"),
        (f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "b.db"),
        (":memory:", None),
    ]:
        store = open_store(location)
        assert isinstance(store, SqliteStateStore)
        try:
            await store.put_binding(KEY, BINDING)
            assert await store.get_binding(KEY) == BINDING
        finally:
            await store.aclose()
        assert file is None or file.is_file()


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("rediss://:s3cret@cache:6380/2", "rediss://:***@cache:6380/2"),
        ("redis://app:s3cret@cache/0", "redis://app:***@cache/0"),
    ],
)
def test_open_store_on_redis_gives_the_redis_store_with_the_password_redacted(
    location: str, shown: str
) -> None:
    store = open_store(location)
    assert isinstance(store, OutageTolerantStore)  # bot/store/outage.py: outages waited out
    assert isinstance(store.inner, RedisStateStore)
    assert store.location == store.inner.location == shown == redacted_url(location)


def test_a_stores_optional_abilities_are_told_by_isinstance(tmp_path: Path) -> None:
    sqlite = open_store(str(tmp_path / "state.db"))
    redis_store = open_store("redis://127.0.0.1:1/0")
    abilities = (FencedStore, StoreWrapper, BackgroundWriter, ScriptingStore)
    assert [isinstance(sqlite, ability) for ability in abilities] == [False] * 4
    assert [isinstance(redis_store, ability) for ability in abilities] == [
        False,  # the fence and the cluster's scripts reach the backend itself, not the wrapper
        True,
        True,
        False,
    ]
    backend = inner_store(redis_store)
    assert isinstance(backend, RedisStateStore) and inner_store(sqlite) is sqlite
    assert isinstance(backend, FencedStore) and isinstance(backend, ScriptingStore)
    assert not isinstance(backend, BackgroundWriter)


@pytest.mark.anyio
async def test_an_unreachable_redis_is_one_sentence_naming_the_setting_without_the_password() -> (
    None
):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = open_store(f"redis://:s3cret@127.0.0.1:{port}/0")
    try:
        with pytest.raises(StoreError) as caught:
            await store.check_writable()
    finally:
        await store.aclose()
    message = str(caught.value)
    assert message == (
        f"The state store at redis://:***@127.0.0.1:{port}/0 cannot be used:"
        " the Redis server cannot be reached; check SWITCHBOARD_STATE"
    )
    assert "s3cret" not in message


@pytest.mark.anyio
async def test_redis_keys_are_namespaced_and_expiring_items_carry_an_expiry(
    redis_server: str, clock: FakeClock
) -> None:
    backend = Backend("redis", redis_server, None)
    with backend.raw() as client:
        client.flushdb()
    store = backend.open(clock)
    try:
        await store.put_binding(KEY, BINDING)
        await store.claim_event("tg:update:1", ttl=10)
        await store.put_approvals(approvals("g1", "t1"), ttl=30)
    finally:
        await store.aclose()
    with backend.raw() as client:
        keys = client.keys("*")
        assert keys and all(k.startswith(PREFIX) for k in keys)
        for key in (
            f"{PREFIX}event:tg:update:1",
            f"{PREFIX}approval:t1",
            f"{PREFIX}approval-group:g1",
        ):
            assert 0 < client.pttl(key) <= 30_000 + 60_000


def test_open_store_rejects_an_unknown_scheme() -> None:
    with pytest.raises(ConfigError, match="SWITCHBOARD_STATE"):
        open_store("postgres://db/switchboard")


@pytest.mark.anyio
async def test_calls_made_at_once_are_each_atomic_and_a_failing_one_fails_alone(
    tmp_path: Path,
) -> None:
    store = SqliteStateStore(tmp_path / "state.db")
    claimed: list[bool] = []
    failures: list[StoreError] = []

    async def claim(n: int) -> None:
        claimed.append(await store.claim_event(f"event-{n}", 60))

    async def broken() -> None:
        try:
            await store._execute("INSERT INTO no_such_table VALUES (1)")
        except StoreError as exc:
            failures.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(claim, n)
                if n == 25:
                    tg.start_soon(broken)
        assert claimed == [True] * 50
        assert len(failures) == 1 and "no_such_table" in str(failures[0])
        again = [await store.claim_event(f"event-{n}", 60) for n in range(50)]
    finally:
        await store.aclose()
    assert again == [False] * 50  # every other call's write was kept
