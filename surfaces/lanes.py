"""Ordered per-conversation lanes: the events of one conversation reach the bot in order, one
after the other, while other conversations go on at the same time.

Platform SDKs hand events over concurrently (or from a callback that must not block), so an
adapter files each event with `Lanes.put` without awaiting; the first event of an idle
conversation starts a task (in the task group given to `open`) that hands that conversation's
events to `deliver` one by one, each once the previous one was accepted, and ends when the lane
is empty. Button presses usually skip the lanes: they must be answered at once.

A failure of `deliver` is logged and the lane goes on with the next event: one bad event must
not silence a conversation."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio.abc

__all__ = ["Lanes"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
E = TypeVar("E")


class Lanes(Generic[K, E]):
    """`deliver(event)` for each event `put` under a key, in order per key. `failure` is the log
    message for an event `deliver` raised on, with one `%s` for the key."""

    def __init__(
        self,
        deliver: Callable[[E], Awaitable[None]],
        *,
        failure: str = "the bot failed on an event in %s",
        logger: logging.Logger = log,
    ) -> None:
        self._deliver = deliver
        self._failure = failure
        self._log = logger
        self._lanes: dict[K, deque[E]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def __len__(self) -> int:
        """How many conversations have events still to hand over."""
        return len(self._lanes)

    def open(self, tg: anyio.abc.TaskGroup) -> None:
        """Start taking events; lanes run as tasks of `tg`."""
        self._tg = tg

    def close(self) -> None:
        """Take no new events (those already filed are still handed over while `tg` runs)."""
        self._tg = None

    def put(self, key: K, event: E) -> bool:
        """File `event` behind the others of `key`. False: not open, so the event is dropped."""
        lane = self._lanes.get(key)
        if lane is not None:
            lane.append(event)
            return True
        if self._tg is None:
            return False
        lane = self._lanes[key] = deque([event])
        try:
            self._tg.start_soon(self._drain, key, lane)
        except RuntimeError:  # the task group is closing: we are shutting down
            del self._lanes[key]
            return False
        return True

    async def _drain(self, key: K, lane: deque[E]) -> None:
        try:
            while lane:
                try:
                    await self._deliver(lane[0])
                except Exception:
                    self._log.exception(self._failure, key)
                lane.popleft()
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]
