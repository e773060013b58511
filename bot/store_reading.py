"""A value the HTTP probes read from the state store (the ledger backlog for `/metrics`, a test
write for `/readyz`), which must answer in bounded time whatever the store does.

A store call cannot be cut short: it is shielded (a round trip cancelled halfway would leave the
caller unsure whether a write happened) and an outage-tolerant store waits an outage out for
`SWITCHBOARD_STATE_WAIT` seconds. So the read runs in a task of the app's own group, one at a
time, and a probe waits for it at most `wait` seconds; a probe that finds a read still under
way waits for that one instead of starting another, and a read that ends after its probe gave
up is kept for the next probe. What the probe serves meanwhile is the last value read, marked
stale with its age (`stale_for`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import anyio

from bot.store import StoreError

__all__ = ["StoreReading"]

log = logging.getLogger(__name__)

T = TypeVar("T")

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


class StoreReading(Generic[T]):
    """`read` run by `spawn` (the app's task group), waited for at most `wait` seconds per probe;
    `value` is the last value read (`initial` until one is), `read_at` when (monotonic)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        spawn: Spawn,
        *,
        initial: T,
        wait: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._spawn = spawn
        self._wait = wait
        self._clock = clock
        self.value: T = initial
        self.read_at: float | None = None
        self._since = clock()  # for the age of a value never read
        self._under_way: anyio.Event | None = None
        self._problem = ""  # why the last read failed ("" when it did not)

    async def refresh(self) -> str:
        """Read again (or wait for the read under way) for at most `wait` seconds. Returns ""
        when `value` is fresh, else why not, in words: the store's own reason, or that it gave
        no answer in time."""
        done = self._under_way
        if done is None:
            done = self._under_way = anyio.Event()
            self._spawn(self._read_once)
        with anyio.move_on_after(self._wait):
            await done.wait()
        if not done.is_set():
            return f"no answer within {self._wait:g} s"
        return self._problem

    def stale_for(self) -> float:
        """Seconds since `value` was read (since this reading began, when it never was)."""
        return max(0.0, self._clock() - (self.read_at if self.read_at is not None else self._since))

    async def _read_once(self) -> None:
        done = self._under_way
        try:
            self.value = await self._read()
        except StoreError as exc:  # the store's own fault, logged where the store meets it
            self._problem = exc.reason
            log.debug("a probe's read of the state store failed: %s", exc.reason)
        except Exception as exc:  # a bug: the probe goes on with the last value
            self._problem = type(exc).__name__
            log.error("a probe's read of the state store failed unexpectedly", exc_info=exc)
        else:
            self._problem = ""
            self.read_at = self._clock()
        finally:
            self._under_way = None
            if done is not None:
                done.set()
