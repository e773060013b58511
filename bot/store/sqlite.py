"""`SqliteStateStore`: the embedded state store, one SQLite file (WAL) in the bot's own process.

Its calls run on one dedicated thread (bot/store/sqlite_thread.py), the calls queued together as
one transaction; the schema, and bringing an older file up to it, is bot/store/sqlite_schema.py.
The audit log is pruned by age on each write.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bot.conversation import Binding, ConversationKey
from bot.store.records import (
    MAX_SESSION_HISTORY,
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    SessionRecord,
)
from bot.store.sqlite_thread import Op, StoreThread

__all__ = ["SqliteStateStore"]

T = TypeVar("T")

PURGE_INTERVAL = 60.0  # seconds between sweeps of expired de-duplication keys and approvals


def _key(row: Any, at: int) -> ConversationKey:
    return ConversationKey(row[at], row[at + 1], row[at + 2])


_APPROVAL_COLUMNS = (
    "token, grp, option_id, requester, surface, chat, thread, created, replica, message"
)


def _approval(row: Any) -> ApprovalRecord:
    return ApprovalRecord(row[0], row[1], row[2], row[3], _key(row, 4), row[7], row[8], row[9])


class SqliteStateStore:
    """The embedded store: one SQLite file, every call on the store's own thread (started on
    first use, ended by `aclose`). Created on first use.

    `clock` (wall-clock seconds) decides expiry; it is injectable for tests. Wall time rather than
    a monotonic clock, because expiry instants are stored and must mean the same after a restart.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.location = str(path)
        target = None if self.location == ":memory:" else Path(self.location).expanduser()
        self._thread = StoreThread(self.location, target, clock)
        self._last_purge = float("-inf")

    # -- plumbing ---------------------------------------------------------------------------

    async def _run(self, op: Op[T], *, write: bool) -> T:
        return await self._thread.run(op, write=write)

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

    # -- a conversation's own settings (issue 24: /busy) -------------------------------------

    async def conversation_setting(self, key: ConversationKey, name: str) -> str | None:
        def op(conn: sqlite3.Connection, now: float) -> str | None:
            row = conn.execute(
                "SELECT value FROM conversation_settings"
                " WHERE surface = ? AND chat = ? AND thread = ? AND name = ?",
                (key.surface, key.chat, key.thread, name),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._run(op, write=False)

    async def set_conversation_setting(
        self, key: ConversationKey, name: str, value: str | None
    ) -> None:
        if value is None:
            await self._execute(
                "DELETE FROM conversation_settings"
                " WHERE surface = ? AND chat = ? AND thread = ? AND name = ?",
                (key.surface, key.chat, key.thread, name),
            )
        else:
            await self._execute(
                "REPLACE INTO conversation_settings VALUES (?, ?, ?, ?, ?)",
                (key.surface, key.chat, key.thread, name, value),
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
        await self._thread.close()


def _details(text: str) -> dict[str, str]:
    """An audit row's details as written; a row another tool mangled reads as none."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(name): str(item) for name, item in value.items()}
