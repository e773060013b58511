"""What Switchboard keeps of a terminal's output, and how fast it reads it.

A command can print faster than anyone can read (`yes`): reading it all would spend Switchboard's
own CPU on bytes nobody sees, however low the command's priority. So each agent's terminals
share a `ReadBudget` (bytes per second, a token bucket): past it the reader waits, the pipe
fills, and the command blocks in its write, costing nobody anything. Of what is read, an
`OutputTail` keeps the last `limit` bytes as whole chunks, trimming the oldest without copying the
rest each time."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

READ_RATE = 2 * 1024 * 1024  # bytes per second, for all the terminals of one agent together
_BURST = 512 * 1024  # read at once before the rate applies


class ReadBudget:
    """A token bucket of bytes: `spend` waits while the bucket is empty."""

    def __init__(
        self,
        rate: float = READ_RATE,
        burst: float = _BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = burst
        self._at = clock()

    async def spend(self, size: int) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= size
        if self._tokens < 0:
            await self._sleep(-self._tokens / self.rate)


class OutputTail:
    """The last `limit` bytes of a stream, cut at a UTF-8 character boundary."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._dropped = False

    def add(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size - len(self._chunks[0]) >= self.limit:  # a whole chunk to spare
            self._size -= len(self._chunks.popleft())
            self._dropped = True

    @property
    def truncated(self) -> bool:
        return self._dropped or self._size > self.limit

    @property
    def data(self) -> bytes:
        joined = b"".join(self._chunks)
        excess = len(joined) - self.limit
        if excess <= 0:
            return joined
        # skip continuation bytes (10xxxxxx): never start the kept text mid-character
        while excess < len(joined) and joined[excess] & 0xC0 == 0x80:
            excess += 1
        return joined[excess:]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def last_line(self) -> str:
        last = list(itertools.islice(reversed(self._chunks), 2))
        tail = b"".join(reversed(last))[-512:]
        lines = tail.decode("utf-8", "replace").strip().splitlines()
        return lines[-1].strip() if lines else ""
