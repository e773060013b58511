"""The SQLite state file's schema, and opening a connection to it.

The schema is created on open, and a table added by a later version is created then too, so a
state file written by an earlier version still opens; a column added later (`_ADDED_COLUMNS`) is
added to an older file's table then, in one transaction. The file is made private
(bot/store/sqlite_file.py) before SQLite opens it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bot.store.sqlite_file import prepare_private, tighten_side_files

__all__ = ["BUSY_TIMEOUT", "open_connection"]

BUSY_TIMEOUT = 5.0  # seconds to wait for another process (e.g. `switchboard doctor`) to commit

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
CREATE TABLE IF NOT EXISTS conversation_settings (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL, name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (surface, chat, thread, name)
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


def open_connection(target: Path | None) -> sqlite3.Connection:
    """A connection to the state file `target` (None: in memory), its schema brought up to
    date; made on the store's thread, which alone uses it."""
    if target is not None:
        prepare_private(target)  # 0700 directories, a 0600 file (bot/store/sqlite_file.py)
    conn = sqlite3.connect(
        ":memory:" if target is None else target,
        timeout=BUSY_TIMEOUT,
        isolation_level=None,  # we issue BEGIN/COMMIT ourselves
        check_same_thread=False,  # opened and used on the store's thread, closed there too
    )
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        if target is not None:
            tighten_side_files(target)
        conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives a crash
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
        conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn
