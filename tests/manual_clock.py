"""A clock a test moves by hand, for code that takes `clock` and `sleep` (the chat pacers of
surfaces/pacing.py): time stands still until `advance`, so a test of pacing neither waits nor
depends on how busy the machine is."""

from __future__ import annotations

import anyio
from anyio.lowlevel import checkpoint


class ManualClock:
    """`clock()` reads the time; `await clock.sleep(s)` returns once `advance` has moved the time
    `s` seconds on."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await checkpoint()
            return
        woken = anyio.Event()
        self._sleepers.append((self.now + seconds, woken))
        await woken.wait()

    async def advance(self, seconds: float) -> None:
        """Move the time on, wake whoever's sleep has ended, and let every task run until all
        wait again."""
        await anyio.wait_all_tasks_blocked()
        self.now += seconds
        due = [sleeper for sleeper in self._sleepers if sleeper[0] <= self.now]
        self._sleepers = [sleeper for sleeper in self._sleepers if sleeper[0] > self.now]
        for _, woken in due:
            woken.set()
        await anyio.wait_all_tasks_blocked()
