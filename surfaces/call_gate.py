"""Per-key spacing of platform calls, counted from when the previous call *finished*.

Platforms count a chat's (or channel's) calls as they arrive. The engine's pacer spaces the
*starts* of calls, but a call that waited longer on the way (a queue for connections, a busy
event loop, a slow request) would otherwise arrive right behind the one before: uneven latency
bunches arrivals. Only a finished call is known to have arrived, so a `CallGate` runs one call
per key at a time and starts each at least `interval` after the previous one on that key ended.

A 429 limits the whole chat, not one request: `penalize` holds every call for that key back
(those already queued included) until the platform's `retry_after` has passed.

Keys that have nothing queued and nothing left to wait for are forgotten (`prune`, also run by
`call` itself every `prune_every` seconds); a forgotten key behaves exactly like a new one."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Key:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    ready: float = -math.inf  # no call may start before this (monotonic clock)
    users: int = 0  # callers queued or inside `call`


class CallGate(Generic[K]):
    """One call at a time per key, each started >= `interval` after the previous one finished,
    and none before a penalty (a 429's retry_after) has run out."""

    def __init__(self, interval: float, *, prune_every: float = 60.0) -> None:
        self.interval = interval
        self._prune_every = prune_every
        self._keys: dict[K, _Key] = {}
        self._next_prune = time.monotonic() + prune_every

    def __len__(self) -> int:
        """How many keys the gate remembers."""
        return len(self._keys)

    def _key(self, key: K) -> _Key:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key()
        return state

    @asynccontextmanager
    async def call(self, key: K) -> AsyncIterator[None]:
        """Wait for `key`'s turn, then run the body (the platform call); when the body ends, by
        returning or raising, the next call on `key` may start `interval` later. A caller
        cancelled while waiting leaves no trace."""
        now = time.monotonic()
        if now >= self._next_prune:
            self.prune()
        state = self._key(key)
        state.users += 1
        try:
            async with state.lock:
                while (delay := state.ready - time.monotonic()) > 0:
                    await anyio.sleep(delay)
                try:
                    yield
                finally:
                    state.ready = max(state.ready, time.monotonic() + self.interval)
        finally:
            state.users -= 1

    def penalize(self, key: K, seconds: float) -> None:
        """Hold every call on `key` back for `seconds` from now (a 429's retry_after)."""
        state = self._key(key)
        state.ready = max(state.ready, time.monotonic() + seconds)

    def prune(self) -> None:
        """Forget keys with no caller and no wait left: they are as good as new."""
        now = time.monotonic()
        self._next_prune = now + self._prune_every
        idle = [k for k, s in self._keys.items() if s.users == 0 and s.ready <= now]
        for key in idle:
            del self._keys[key]
