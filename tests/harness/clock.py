"""Time a test controls, so a test of pacing or a timeout neither sleeps nor depends on the load.

- `FakeClock`, for code that takes a `clock=` (and a `sleep=`): read by the code, moved by the test
  (`advance`) or by the code's own `sleep`, which records each wait and returns at once.
- `virtual_time`, a marker for an async test whose code keeps time with anyio (`anyio.sleep`,
  `anyio.current_time`, `move_on_after`): the test runs on trio under `trio.testing.MockClock`,
  which jumps to the next deadline whenever every task waits. Only for code that waits on nothing
  outside the event loop (no thread, process or socket: the clock would jump past them)."""

from __future__ import annotations

from typing import Any

import pytest
from trio.testing import MockClock

VIRTUAL_TIME = "trio-virtual-time"
virtual_time = pytest.mark.parametrize("anyio_backend", [VIRTUAL_TIME], indirect=True)


def backend_for(param: object) -> Any:
    """conftest's `anyio_backend` for a test: virtual time when it is marked `virtual_time`."""
    if param == VIRTUAL_TIME:
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return "asyncio"


class FakeClock:
    """Seconds on a clock only the test and the code's sleeps move."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.waits: list[float] = []  # every sleep asked for, in order

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
