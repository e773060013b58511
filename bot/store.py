"""State that must outlive a turn or a restart: conversation bindings (with their project and
agent), place bindings (the project a topic, thread or chat starts conversations in), inbound
de-duplication keys, pending approval tokens, the delivery ledger, the journal of turns in
flight and the audit log (`audit_put` prunes what is older than it keeps; a Redis version keeps
it as a sorted set scored by time, trimmed with `ZREMRANGEBYSCORE` in the same script).

`StateStore` is the seam. Its contract is written so a shared Redis store can replace the embedded
SQLite one without touching callers:

- every method is one atomic operation; no transaction ever spans two calls, so callers never
  hold a lock or see half of another caller's write;
- expiry is a TTL in seconds given at write time; an expired item behaves as if absent;
- nothing backend-specific (SQL, connections, cursors) appears in the protocol, only the
  dataclasses below.

The Redis version (bot/redis_store.py) maps each call to one round trip: `claim_event` is a
script that checks the stored expiry and `SET`s with `PX`;
`put_approvals` writes each token (and a set per group) in one `MULTI` with `EXPIRE`;
`take_approval` is a Lua script (or `WATCH`/`MULTI`) that reads the token and deletes every token of
its group, so two replicas pressing the same button cannot both win; the ledger is a hash plus a
sorted set scored by `created`; the turn journal is a hash per turn (`journal:<turn id>`, with
`EXPIRE ttl`) plus a sorted set of turn ids scored by `started`: `journal_open` writes both in one
`MULTI`, `journal_close` removes both, `journal_open_turns` reads the set and skips (and removes)
ids whose hash has expired. `ledger_put(entry, closes_turn=...)` adds the ledger entry and removes
the turn in one `MULTI`.

The schema is created on open, and a table added by a later version is created then too, so a
state file written by an earlier version still opens; a column added later (`_ADDED_COLUMNS`) is
added to an older file's table then, in one transaction.

Failures are translated once, here: `sqlite3` and file-system errors become `StoreError`; a
full disk (SQLite's "database or disk is full", `ENOSPC`, `EDQUOT`) becomes `StoreFull`.
"""

from __future__ import annotations

import asyncio
import errno
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from bot.conversation import Binding, ConversationKey
from config import ConfigError

__all__ = [
    "ApprovalRecord",
    "AuditRecord",
    "DeliveryEntry",
    "JournalEntry",
    "LeaseLost",
    "SessionRecord",
    "SqliteStateStore",
    "StateStore",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "open_store",
]

T = TypeVar("T")

PURGE_INTERVAL = 60.0  # seconds between sweeps of expired de-duplication keys and approvals
BUSY_TIMEOUT = 5.0  # seconds to wait for another process (e.g. `switchboard doctor`) to commit
MAX_SESSION_HISTORY = 20  # agent sessions remembered per conversation (the least recent go)
DEFAULT_STATE_WAIT = 10.0  # seconds a Redis outage is waited out (SWITCHBOARD_STATE_WAIT's default)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One one-time choice token. All tokens offered for one permission request share `group`."""

    token: str
    group: str
    option_id: str
    requester: str
    key: ConversationKey
    created: float
    replica: str = ""  # the replica that asked (see `DeliveryEntry.replica`)
    message: str = ""  # the card's message id on its surface ("" until it is shown)


@dataclass(frozen=True, slots=True)
class DeliveryEntry:
    """A final reply that must reach the user, kept until delivery is confirmed."""

    entry_id: str
    key: ConversationKey
    text: str
    created: float
    attempts: int = 0
    replica: str = ""  # the replica that wrote it ("" before replicas, or with one process)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A turn in flight. It is opened when the turn starts and closed when the turn's final text
    reaches the ledger, so an entry still open at start-up is a turn the process died in."""

    turn_id: str
    key: ConversationKey
    requester: str  # the platform user id of the person who asked
    started: float
    replica: str = ""  # the replica running the turn (see `DeliveryEntry.replica`)
    # A message waiting behind a running turn, not a turn: the message itself (bot/cluster.py's
    # `encode_event`), so whoever adopts it after a crash sends it on instead of losing it.
    message: str = ""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """An agent session a conversation used, in one project: what `/sessions` lists. `title` is
    the agent's latest (session_info_update), "" until it gives one; times are epoch seconds."""

    session_id: str
    project: str
    backend: str
    workspace: str
    title: str = ""
    created: float = 0.0
    last_used: float = 0.0


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit log entry (bot/audit.py): an approval, an admin action or a refused access.
    `actor` is who did it (a platform user id); `details` never holds message text or tokens."""

    at: float  # epoch seconds
    kind: str  # approval | admin | refused
    surface: str
    actor: str
    action: str
    details: dict[str, str]

    def as_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "kind": self.kind,
            "surface": self.surface,
            "actor": self.actor,
            "action": self.action,
            **self.details,
        }


class StoreError(Exception):
    """The state store cannot be opened, read or written."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"The state store at {location} cannot be used: {reason}")


class LeaseLost(StoreError):
    """A write for a conversation whose lease this replica no longer holds (it expired and
    another replica took the conversation): the write is refused, and the turn that made it
    stops without writing anything more (bot/cluster.py)."""

    def __init__(self, location: str, key: ConversationKey) -> None:
        self.key = key
        super().__init__(location, f"another replica now serves {key}")


class StoreUnavailable(StoreError):
    """The state store cannot be reached or gave no answer in time, as distinct from an answer
    that refuses (a wrong password, a bad reply): worth waiting for, since it may come back.
    `location` is already redacted."""


class StoreFull(StoreError):
    """The store answered but has no room to write: its disk is full (SQLite), or the Redis
    server is out of memory or cannot save to its own disk. Nothing new can be recorded until an
    operator makes room; `room` says which, in words the person can be told."""

    def __init__(self, location: str, reason: str, *, room: str = "the disk is full") -> None:
        self.room = room
        super().__init__(location, reason)


class StateStore(Protocol):
    async def get_binding(self, key: ConversationKey) -> Binding | None: ...

    async def put_binding(self, key: ConversationKey, binding: Binding) -> None: ...

    async def delete_binding(self, key: ConversationKey) -> None: ...

    async def get_place(self, place: ConversationKey) -> str | None:
        """The project a place (a topic, thread, channel or group) is bound to, if any."""
        ...

    async def put_place(self, place: ConversationKey, project: str) -> None: ...

    async def delete_place(self, place: ConversationKey) -> None: ...

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        """True the first time `event_key` is seen within `ttl` seconds, False for a redelivery.
        An expired key may be claimed again. A `claimant` (a unique token per claim) makes the
        claim safe to retry: a claim that was made but whose answer was lost is won again by the
        same claimant, not taken for a redelivery."""
        ...

    async def put_approvals(self, records: Sequence[ApprovalRecord], ttl: float) -> None: ...

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        """Consume `token` and every other token of its group; None when unknown, expired or
        already used. Of two concurrent takes in one group, exactly one gets the record."""
        ...

    async def drop_approvals(self, group: str) -> None: ...

    async def approval_shown(self, group: str, message: str) -> None:
        """The group's card is the surface's message `message` (what closes it after a crash)."""
        ...

    async def approvals_pending(self) -> list[ApprovalRecord]:
        """Every unexpired token, oldest first."""
        ...

    async def ledger_put(self, entry: DeliveryEntry, *, closes_turn: str | None = None) -> None:
        """Keep `entry` until `ledger_done`. With `closes_turn`, that journalled turn is closed in
        the same atomic write: a crash finds either the turn in flight or its final text, never
        both, so a restart neither repeats nor loses the answer."""
        ...

    async def ledger_done(self, entry_id: str) -> None: ...

    async def ledger_pending(self) -> list[DeliveryEntry]:
        """Undelivered entries, oldest first."""
        ...

    async def ledger_attempted(self, entry_id: str) -> None: ...

    async def journal_open(self, entry: JournalEntry, ttl: float) -> None: ...

    async def journal_close(self, turn_id: str) -> None:
        """Remove the turn from the journal; closing an unknown or closed turn does nothing."""
        ...

    async def journal_open_turns(self) -> list[JournalEntry]:
        """Turns still in flight, oldest first."""
        ...

    async def history_record(self, key: ConversationKey, record: SessionRecord) -> None:
        """The conversation uses `record`'s session now: added, or its `last_used` (and title,
        when `record` has one) updated; `created` stays the first one's. Only the
        `MAX_SESSION_HISTORY` most recently used per conversation are kept."""
        ...

    async def history_title(self, session_id: str, title: str) -> None:
        """The agent's new title for a session, wherever it was recorded."""
        ...

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        """The conversation's sessions in `project`, most recently used first."""
        ...

    async def history_owners(self, session_id: str) -> list[ConversationKey]:
        """Every conversation that recorded the session."""
        ...

    async def audit_put(self, record: AuditRecord, keep: float) -> None:
        """Keep `record`; records older than `keep` seconds are pruned."""
        ...

    async def audit_since(self, since: float) -> list[AuditRecord]:
        """The records at or after `since` (epoch seconds), oldest first."""
        ...

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        """The newest `limit` records, newest first."""
        ...

    async def check_writable(self) -> None:
        """Raise StoreError unless a write succeeds."""
        ...

    async def aclose(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS bindings (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    session_id TEXT NOT NULL, backend TEXT NOT NULL, workspace TEXT NOT NULL,
    model TEXT NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (surface, chat, thread)
);
CREATE TABLE IF NOT EXISTS events (event_key TEXT PRIMARY KEY, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS approvals (
    token TEXT PRIMARY KEY, grp TEXT NOT NULL, option_id TEXT NOT NULL, requester TEXT NOT NULL,
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_by_group ON approvals (grp);
CREATE TABLE IF NOT EXISTS ledger (
    entry_id TEXT PRIMARY KEY, surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    text TEXT NOT NULL, created REAL NOT NULL, attempts INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS places (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL, project TEXT NOT NULL,
    PRIMARY KEY (surface, chat, thread)
);
CREATE TABLE IF NOT EXISTS journal (
    turn_id TEXT PRIMARY KEY, surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    requester TEXT NOT NULL, started REAL NOT NULL, expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS session_history (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL, session_id TEXT NOT NULL,
    project TEXT NOT NULL, backend TEXT NOT NULL, workspace TEXT NOT NULL, title TEXT NOT NULL,
    created REAL NOT NULL, last_used REAL NOT NULL,
    PRIMARY KEY (surface, chat, thread, session_id)
);
CREATE INDEX IF NOT EXISTS session_history_by_id ON session_history (session_id);
CREATE TABLE IF NOT EXISTS audit (
    at REAL NOT NULL, kind TEXT NOT NULL, surface TEXT NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, details TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_time ON audit (at);
"""


# Columns later versions added to tables an earlier version created: (table, column, its SQL).
_ADDED_COLUMNS = (
    ("bindings", "project", "TEXT NOT NULL DEFAULT ''"),  # issue 14: a conversation's project
    ("bindings", "agent", "TEXT NOT NULL DEFAULT ''"),
    ("ledger", "replica", "TEXT NOT NULL DEFAULT ''"),  # issue 16: who wrote it
    ("journal", "replica", "TEXT NOT NULL DEFAULT ''"),
    ("events", "claimant", "TEXT NOT NULL DEFAULT ''"),
    ("journal", "message", "TEXT NOT NULL DEFAULT ''"),
    ("approvals", "replica", "TEXT NOT NULL DEFAULT ''"),  # issue 21: old cards withdrawn
    ("approvals", "message", "TEXT NOT NULL DEFAULT ''"),
)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a state file written by an earlier version up to this schema, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, column, sql in _ADDED_COLUMNS:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _key(row: Any, at: int) -> ConversationKey:
    return ConversationKey(row[at], row[at + 1], row[at + 2])


_APPROVAL_COLUMNS = (
    "token, grp, option_id, requester, surface, chat, thread, created, replica, message"
)


def _approval(row: Any) -> ApprovalRecord:
    return ApprovalRecord(row[0], row[1], row[2], row[3], _key(row, 4), row[7], row[8], row[9])


def _translated(exc: Exception, location: str) -> Exception:
    """sqlite3 and file-system errors become StoreError (StoreFull for a full disk); anything
    else (a bug) stays itself."""
    if isinstance(exc, sqlite3.Error | OSError):
        error = (StoreFull if _disk_full(exc) else StoreError)(location, _reason(exc))
        error.__cause__ = exc  # as `raise ... from exc` would: the logs keep the detail
        return error
    return exc


def _disk_full(exc: Exception) -> bool:
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


class _Call:
    """One call queued to the store's thread: `op` (None: close the store), and where its
    outcome goes."""

    __slots__ = ("future", "loop", "op", "write")

    def __init__(
        self,
        op: Callable[[sqlite3.Connection, float], Any] | None,
        write: bool,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.op = op
        self.write = write
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


_Outcome = tuple[_Call, Any, BaseException | None]


def _settle(outcomes: list[_Outcome]) -> None:
    for call, result, error in outcomes:
        if not call.future.done():
            if error is None:
                call.future.set_result(result)
            else:
                call.future.set_exception(error)


class SqliteStateStore:
    """The embedded store: one SQLite file (WAL), one connection, all on one dedicated thread
    (started on first use, ended by `aclose`), which serialises the calls.

    The calls queued when the thread wakes run as one transaction, each in a savepoint of its
    own (a failing call rolls back only itself, so each call is still one atomic operation), and
    their callers are woken with one hand-off per batch: when a thousand turns end at once, the
    store costs a commit and a wake-up per burst rather than per call, and the last of them does
    not wait behind hundreds of commits. Created on first use.

    `clock` (wall-clock seconds) decides expiry; it is injectable for tests. Wall time rather than
    a monotonic clock, because expiry instants are stored and must mean the same after a restart.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.location = str(path)
        memory = self.location == ":memory:"
        self._target = None if memory else Path(self.location).expanduser()
        self._clock = clock
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._last_purge = float("-inf")

    # -- plumbing ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(self.location, "the store is closed")
        if self._conn is not None:
            return self._conn
        if self._target is not None:
            self._target.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            ":memory:" if self._target is None else self._target,
            timeout=BUSY_TIMEOUT,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # opened and used on the store's thread, closed there too
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives a crash
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
            conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
            _migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _serve(self) -> None:
        """The store's thread: take what is queued, run it, until the store is closed."""
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if not self._run_batch(batch):
                return

    def _run_batch(self, batch: list[_Call]) -> bool:
        """Run `batch` in order and wake its callers; False once the store is closed (a call
        queued behind the close finds it closed)."""
        outcomes: list[_Outcome] = []
        calls: list[_Call] = []
        for call in batch:
            if self._closed:
                outcomes.append((call, None, StoreError(self.location, "the store is closed")))
            elif call.op is None:
                outcomes += self._transaction(calls)
                calls = []
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                outcomes.append((call, None, None))
            else:
                calls.append(call)
        outcomes += self._transaction(calls)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for outcome in outcomes:
            by_loop.setdefault(outcome[0].loop, []).append(outcome)
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass
        return not self._closed

    def _transaction(self, calls: list[_Call]) -> list[_Outcome]:
        if not calls:
            return []
        alone = len(calls) == 1
        outcomes: list[_Outcome] = []
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE" if any(call.write for call in calls) else "BEGIN")
            try:
                for call in calls:
                    assert call.op is not None
                    if alone:
                        outcomes.append((call, call.op(conn, self._clock()), None))
                        continue
                    conn.execute("SAVEPOINT call")
                    try:
                        result = call.op(conn, self._clock())
                    except Exception as exc:
                        conn.execute("ROLLBACK TO call")
                        outcomes.append((call, None, _translated(exc, self.location)))
                    else:
                        outcomes.append((call, result, None))
                    conn.execute("RELEASE call")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except Exception as exc:  # the transaction itself failed, so every call in it did
            error = _translated(exc, self.location)
            return [(call, None, error) for call in calls]
        return outcomes

    async def _on_thread(
        self, op: Callable[[sqlite3.Connection, float], T] | None, write: bool
    ) -> T:
        """Run `op` on the store's thread (None: close the store there). A cancelled caller
        starts nothing, and waits for what it started (so no write is left half-known): the
        cancellation takes effect after."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise StoreError(self.location, "the store is closed")
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="switchboard-store", daemon=True
            )
            self._thread.start()
        call = _Call(op, write, asyncio.get_running_loop())
        self._queue.put(call)
        with anyio.CancelScope(shield=True):
            result: T = await call.future
        return result

    async def _run(self, op: Callable[[sqlite3.Connection, float], T], *, write: bool) -> T:
        return await self._on_thread(op, write)

    async def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            conn.execute(sql, params)

        await self._run(op, write=True)

    def _maybe_purge(self, conn: sqlite3.Connection, now: float) -> None:
        if now - self._last_purge < PURGE_INTERVAL:
            return
        conn.execute("DELETE FROM events WHERE expires <= ?", (now,))
        conn.execute("DELETE FROM approvals WHERE expires <= ?", (now,))
        conn.execute("DELETE FROM journal WHERE expires <= ?", (now,))
        self._last_purge = now

    # -- bindings ---------------------------------------------------------------------------

    async def get_binding(self, key: ConversationKey) -> Binding | None:
        def op(conn: sqlite3.Connection, now: float) -> Binding | None:
            row = conn.execute(
                "SELECT session_id, backend, workspace, model, generation, project, agent"
                " FROM bindings WHERE surface = ? AND chat = ? AND thread = ?",
                (key.surface, key.chat, key.thread),
            ).fetchone()
            return None if row is None else Binding(*row)

        return await self._run(op, write=False)

    async def put_binding(self, key: ConversationKey, binding: Binding) -> None:
        await self._execute(
            "REPLACE INTO bindings (surface, chat, thread, session_id, backend, workspace, model,"
            " generation, project, agent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key.surface, key.chat, key.thread, binding.session_id, binding.backend,
             binding.workspace, binding.model, binding.generation, binding.project,
             binding.agent),
        )  # fmt: skip

    async def delete_binding(self, key: ConversationKey) -> None:
        await self._execute(
            "DELETE FROM bindings WHERE surface = ? AND chat = ? AND thread = ?",
            (key.surface, key.chat, key.thread),
        )

    # -- place bindings (issue 14): the project new conversations in a place start in ------

    async def get_place(self, place: ConversationKey) -> str | None:
        def op(conn: sqlite3.Connection, now: float) -> str | None:
            row = conn.execute(
                "SELECT project FROM places WHERE surface = ? AND chat = ? AND thread = ?",
                (place.surface, place.chat, place.thread),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._run(op, write=False)

    async def put_place(self, place: ConversationKey, project: str) -> None:
        await self._execute(
            "REPLACE INTO places VALUES (?, ?, ?, ?)",
            (place.surface, place.chat, place.thread, project),
        )

    async def delete_place(self, place: ConversationKey) -> None:
        await self._execute(
            "DELETE FROM places WHERE surface = ? AND chat = ? AND thread = ?",
            (place.surface, place.chat, place.thread),
        )

    # -- de-duplication ---------------------------------------------------------------------

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        def op(conn: sqlite3.Connection, now: float) -> bool:
            self._maybe_purge(conn, now)
            conn.execute(
                "DELETE FROM events WHERE event_key = ? AND expires <= ?", (event_key, now)
            )
            cursor = conn.execute(
                "INSERT OR IGNORE INTO events (event_key, expires, claimant) VALUES (?, ?, ?)",
                (event_key, now + ttl, claimant),
            )
            if cursor.rowcount == 1:
                return True
            if not claimant:
                return False
            row = conn.execute(
                "SELECT claimant FROM events WHERE event_key = ?", (event_key,)
            ).fetchone()
            return row is not None and row[0] == claimant

        return await self._run(op, write=True)

    # -- approvals --------------------------------------------------------------------------

    async def put_approvals(self, records: Sequence[ApprovalRecord], ttl: float) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            self._maybe_purge(conn, now)
            conn.executemany(
                f"REPLACE INTO approvals ({_APPROVAL_COLUMNS}, expires)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(r.token, r.group, r.option_id, r.requester, r.key.surface, r.key.chat,
                  r.key.thread, r.created, r.replica, r.message, now + ttl) for r in records],
            )  # fmt: skip

        await self._run(op, write=True)

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        def op(conn: sqlite3.Connection, now: float) -> ApprovalRecord | None:
            row = conn.execute(
                f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE token = ? AND expires > ?",
                (token, now),
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM approvals WHERE grp = ?", (row[1],))
            return _approval(row)

        return await self._run(op, write=True)

    async def drop_approvals(self, group: str) -> None:
        await self._execute("DELETE FROM approvals WHERE grp = ?", (group,))

    async def approval_shown(self, group: str, message: str) -> None:
        await self._execute("UPDATE approvals SET message = ? WHERE grp = ?", (message, group))

    async def approvals_pending(self) -> list[ApprovalRecord]:
        def op(conn: sqlite3.Connection, now: float) -> list[ApprovalRecord]:
            rows = conn.execute(
                f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE expires > ?"
                " ORDER BY created, rowid",
                (now,),
            )
            return [_approval(row) for row in rows]

        return await self._run(op, write=False)

    # -- delivery ledger --------------------------------------------------------------------

    async def ledger_put(self, entry: DeliveryEntry, *, closes_turn: str | None = None) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            # An upsert, not REPLACE: the rowid (insertion order, the tie-break) is kept.
            conn.execute(
                "INSERT INTO ledger (entry_id, surface, chat, thread, text, created, attempts,"
                " replica) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (entry_id) DO UPDATE"
                " SET surface = excluded.surface, chat = excluded.chat, thread = excluded.thread,"
                " text = excluded.text, created = excluded.created, attempts = excluded.attempts,"
                " replica = excluded.replica",
                (entry.entry_id, entry.key.surface, entry.key.chat, entry.key.thread, entry.text,
                 entry.created, entry.attempts, entry.replica),
            )  # fmt: skip
            if closes_turn is not None:
                conn.execute("DELETE FROM journal WHERE turn_id = ?", (closes_turn,))

        await self._run(op, write=True)

    async def ledger_done(self, entry_id: str) -> None:
        await self._execute("DELETE FROM ledger WHERE entry_id = ?", (entry_id,))

    async def ledger_pending(self) -> list[DeliveryEntry]:
        def op(conn: sqlite3.Connection, now: float) -> list[DeliveryEntry]:
            rows = conn.execute(
                "SELECT entry_id, surface, chat, thread, text, created, attempts, replica"
                " FROM ledger ORDER BY created, rowid"
            ).fetchall()
            return [DeliveryEntry(r[0], _key(r, 1), r[4], r[5], r[6], r[7]) for r in rows]

        return await self._run(op, write=False)

    async def ledger_attempted(self, entry_id: str) -> None:
        await self._execute(
            "UPDATE ledger SET attempts = attempts + 1 WHERE entry_id = ?", (entry_id,)
        )

    # -- turn journal -----------------------------------------------------------------------

    async def journal_open(self, entry: JournalEntry, ttl: float) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            self._maybe_purge(conn, now)
            conn.execute(
                "REPLACE INTO journal (turn_id, surface, chat, thread, requester, started,"
                " expires, replica, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.turn_id, entry.key.surface, entry.key.chat, entry.key.thread,
                 entry.requester, entry.started, now + ttl, entry.replica, entry.message),
            )  # fmt: skip

        await self._run(op, write=True)

    async def journal_close(self, turn_id: str) -> None:
        await self._execute("DELETE FROM journal WHERE turn_id = ?", (turn_id,))

    async def journal_open_turns(self) -> list[JournalEntry]:
        def op(conn: sqlite3.Connection, now: float) -> list[JournalEntry]:
            rows = conn.execute(
                "SELECT turn_id, surface, chat, thread, requester, started, replica, message"
                " FROM journal WHERE expires > ? ORDER BY started, rowid",
                (now,),
            ).fetchall()
            return [JournalEntry(r[0], _key(r, 1), r[4], r[5], r[6], r[7]) for r in rows]

        return await self._run(op, write=False)

    # -- a conversation's agent sessions (/sessions, /resume) ---------------------------------

    async def history_record(self, key: ConversationKey, record: SessionRecord) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            where = (key.surface, key.chat, key.thread)
            conn.execute(
                "INSERT INTO session_history VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (surface, chat, thread, session_id) DO UPDATE SET"
                " project = excluded.project, backend = excluded.backend,"
                " workspace = excluded.workspace, last_used = excluded.last_used,"
                " title = CASE WHEN excluded.title = '' THEN title ELSE excluded.title END",
                (*where, record.session_id, record.project, record.backend, record.workspace,
                 record.title, record.created or now, record.last_used or now),
            )  # fmt: skip
            conn.execute(
                "DELETE FROM session_history WHERE surface = ? AND chat = ? AND thread = ?"
                " AND session_id NOT IN (SELECT session_id FROM session_history"
                " WHERE surface = ? AND chat = ? AND thread = ?"
                " ORDER BY last_used DESC, rowid DESC LIMIT ?)",
                (*where, *where, MAX_SESSION_HISTORY),
            )

        await self._run(op, write=True)

    async def history_title(self, session_id: str, title: str) -> None:
        await self._execute(
            "UPDATE session_history SET title = ? WHERE session_id = ?", (title, session_id)
        )

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        def op(conn: sqlite3.Connection, now: float) -> list[SessionRecord]:
            rows = conn.execute(
                "SELECT session_id, project, backend, workspace, title, created, last_used"
                " FROM session_history WHERE surface = ? AND chat = ? AND thread = ?"
                " AND project = ? ORDER BY last_used DESC, rowid DESC",
                (key.surface, key.chat, key.thread, project),
            ).fetchall()
            return [SessionRecord(*row) for row in rows]

        return await self._run(op, write=False)

    async def history_owners(self, session_id: str) -> list[ConversationKey]:
        def op(conn: sqlite3.Connection, now: float) -> list[ConversationKey]:
            rows = conn.execute(
                "SELECT surface, chat, thread FROM session_history WHERE session_id = ?",
                (session_id,),
            ).fetchall()
            return [_key(row, 0) for row in rows]

        return await self._run(op, write=False)

    # -- the audit log (issue 15) ----------------------------------------------------------

    async def audit_put(self, record: AuditRecord, keep: float) -> None:
        def op(conn: sqlite3.Connection, now: float) -> None:
            conn.execute("DELETE FROM audit WHERE at < ?", (now - keep,))
            conn.execute(
                "INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?)",
                (record.at, record.kind, record.surface, record.actor, record.action,
                 json.dumps(record.details, sort_keys=True)),
            )  # fmt: skip

        await self._run(op, write=True)

    async def audit_since(self, since: float) -> list[AuditRecord]:
        def op(conn: sqlite3.Connection, now: float) -> list[AuditRecord]:
            rows = conn.execute(
                "SELECT at, kind, surface, actor, action, details FROM audit WHERE at >= ?"
                " ORDER BY at, rowid",
                (since,),
            ).fetchall()
            return [
                AuditRecord(row[0], row[1], row[2], row[3], row[4], _details(row[5]))
                for row in rows
            ]

        return await self._run(op, write=False)

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        def op(conn: sqlite3.Connection, now: float) -> list[AuditRecord]:
            rows = conn.execute(
                "SELECT at, kind, surface, actor, action, details FROM audit"
                " ORDER BY at DESC, rowid DESC LIMIT ?",
                (max(0, limit),),
            ).fetchall()
            return [
                AuditRecord(row[0], row[1], row[2], row[3], row[4], _details(row[5]))
                for row in rows
            ]

        return await self._run(op, write=False)

    # -- health and shutdown ----------------------------------------------------------------

    async def check_writable(self) -> None:
        # Opening alone is not proof: the directory or file may be read-only. Write a row.
        await self._execute("REPLACE INTO meta VALUES ('checked', 'ok')")

    async def aclose(self) -> None:
        """Behind every call already queued; any later one finds the store closed."""
        if self._thread is not None and not self._closed:  # else no thread, no connection
            await self._on_thread(None, False)
            self._thread = None  # it has returned, or is about to
        self._closed = True


def _details(text: str) -> dict[str, str]:
    """An audit row's details as written; a row another tool mangled reads as none."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(name): str(item) for name, item in value.items()}


def open_store(location: str, *, wait: float = DEFAULT_STATE_WAIT) -> StateStore:
    """The store named by the `state` setting: a path, `sqlite:///path` (`sqlite:////abs/path`
    for an absolute path, as in SQLAlchemy), `:memory:`, or `redis://host:port/db` (`rediss://`
    for TLS, its CA as `?ssl_ca_certs=/path`; a password as `redis://:password@host`), the shared
    store of bot/redis_store.py, behind `OutageTolerantStore` (bot/store_outage.py): a Redis
    outage of up to `wait` seconds (`SWITCHBOARD_STATE_WAIT`) is waited out. Nothing is opened
    until first use."""
    if location.startswith(("redis://", "rediss://")):
        # Both build on this module's records, hence imported here.
        from bot.redis_store import RedisStateStore
        from bot.store_outage import OutageTolerantStore

        return OutageTolerantStore(RedisStateStore(location), wait=wait)
    if location.startswith("sqlite:///"):
        location = location.removeprefix("sqlite:///")
    elif "://" in location:
        scheme = location.split("://", 1)[0]
        raise ConfigError(
            "SWITCHBOARD_STATE", f"unknown store scheme {scheme!r}; give a SQLite file path"
        )
    if not location:
        raise ConfigError("SWITCHBOARD_STATE", "empty; give a SQLite file path")
    return SqliteStateStore(location)
