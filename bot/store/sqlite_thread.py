"""`StoreThread`: the SQLite store's one connection on one dedicated thread (started on first
use, ended by `close`), which serialises the calls.

The calls queued when the thread wakes run as one transaction, each in a savepoint of its own (a
failing call rolls back only itself, so each call is still one atomic operation), and their
callers are woken with one hand-off per batch: when a thousand turns end at once, the store costs
a commit and a wake-up per burst rather than per call, and the last of them does not wait behind
hundreds of commits.

Failures are translated once, here: `sqlite3` and file-system errors become `StoreError`; a
full disk (SQLite's "database or disk is full", `ENOSPC`, `EDQUOT`) becomes `StoreFull`.
"""

from __future__ import annotations

import asyncio
import errno
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from bot.store.errors import StoreError, StoreFull
from bot.store.sqlite_schema import open_connection

__all__ = ["Op", "StoreThread"]

T = TypeVar("T")

# One call's work on the thread: given the connection and the clock's reading for the batch.
Op = Callable[[sqlite3.Connection, float], T]


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


class StoreThread:
    """Runs the store's calls on its thread, against the file `target` (None: in memory);
    `location` names it in errors, `clock` (wall-clock seconds) is read for each call."""

    def __init__(self, location: str, target: Path | None, clock: Callable[[], float]) -> None:
        self.location = location
        self._target = target
        self._clock = clock
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(self.location, "the store is closed")
        if self._conn is None:
            self._conn = open_connection(self._target)
        return self._conn

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

    async def _on_thread(self, op: Op[T] | None, write: bool) -> T:
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

    async def run(self, op: Op[T], *, write: bool) -> T:
        """`op`'s result, or its error translated; `write`: it writes (the batch then takes the
        write lock at once)."""
        return await self._on_thread(op, write)

    async def close(self) -> None:
        """Behind every call already queued; any later one finds the store closed."""
        if self._thread is not None and not self._closed:  # else no thread, no connection
            await self._on_thread(None, False)
            self._thread = None  # it has returned, or is about to
        self._closed = True
