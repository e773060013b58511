"""Pacing: how often the bot may call a platform, all in one place.

Rate-limit state lives where the calls are made, so it lives here, in the surface layer: every
surface's `capabilities.pacing` is one `Pacing`, and a chat's `ChatPacer` is the one gate each
platform call that posts or changes a message in that chat passes, once (`ChatPacer.call`).

Who paces what:

- **Per chat, one call at a time** (`ChatPacer.call` / `Pacing.call`): platforms count calls as
  they arrive, and a call that waited longer on the way (a connection queue, a busy loop, a slow
  request) would otherwise arrive right behind the one before; only a finished call is known to
  have arrived, so one call runs at a time per chat and each starts `min_interval` (the surface's
  `min_edit_interval`) after the previous one ended. Threads of one chat share it: platforms count
  them as one chat. A live reply (`surfaces.live`) makes its calls through it too, and asks
  `ChatPacer.ready` first, so that it works out what to show only once its call can go.
- **Per group, a window** (`GroupWindow`, Telegram's 20 messages a minute in a group): calls are
  counted over the last minute; optional ones (a live reply's updates: `call(optional=True)`)
  also wait for the window, so the group keeps room for the messages that must go.
- **Per surface, a global budget** (`GlobalBudget`, Discord's ~50 requests a second for the whole
  bot): calls take a slot, by priority and then in order.

A 429 holds the whole chat back, not one request: every call of that chat (those already waiting
included) waits until its `retry_after` has passed. It is recorded once, by the first pacer that
sees the `RateLimited` (`call` records what its body raises): `ChatPacer.record` marks it.

Chats with nothing queued and nothing left to wait for are forgotten (`Pacing.prune`); a forgotten
chat behaves exactly like a new one. Every use (`for_chat`; `call`) prunes every `prune_every`
seconds, and also whenever the number of chats remembered has doubled since the last prune, so a
bot meeting many new chats keeps only the busy ones (the cost stays constant per use)."""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from surfaces.errors import RateLimited

__all__ = ["ChatPacer", "GlobalBudget", "GroupWindow", "Pacing", "PacingCounts"]

WINDOW = 60.0  # seconds a GroupWindow counts calls over
# Below this many chats, pruning waits for its time (`prune_every`): it is not worth a scan.
_PRUNE_MIN_SIZE = 256


class GroupWindow:
    """Calls that posted or changed messages in one group over the last minute, so optional calls
    (live updates) keep the group under its budget: at most `per_minute` a minute, `interval`
    apart."""

    def __init__(self, interval: float, per_minute: int) -> None:
        self.interval = interval
        self.per_minute = per_minute
        self.calls: deque[float] = deque()

    def record(self, now: float) -> None:
        self.calls.append(now)

    def optional_wait(self, now: float) -> float:
        """Seconds until an optional call may be made (<= 0: now)."""
        self._forget_before(now - WINDOW)
        if not self.calls:
            return 0.0
        ready = self.calls[-1] + self.interval
        if len(self.calls) >= self.per_minute:
            ready = max(ready, self.calls[-self.per_minute] + WINDOW)
        return ready - now

    def is_idle(self, now: float) -> bool:
        self._forget_before(now - WINDOW)
        return not self.calls

    def _forget_before(self, moment: float) -> None:
        while self.calls and self.calls[0] <= moment:
            self.calls.popleft()


@dataclass(slots=True)
class PacingCounts:
    """What one surface's pacers saw, for the bot's /metrics: the platform calls made through
    `ChatPacer.call` and the 429s recorded (each once). Plain counters: the kit imports no
    metrics library."""

    calls: int = 0
    rate_limited: int = 0


class ChatPacer:
    """One chat's pacing: one platform call at a time (`call`), spaced from the previous one's
    end, and the penalty of a 429 holding every call back."""

    def __init__(
        self,
        min_interval: float,
        *,
        window: GroupWindow | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        counts: PacingCounts | None = None,
        from_start: bool = False,
    ) -> None:
        self.min_interval = min_interval
        # Spaced from the previous call's start rather than its end: for a platform whose own
        # limiter makes a call wait inside it (Discord's global budget), so that wait is not
        # counted twice.
        self._from_start = from_start
        self.window = window  # the group's minute, for chats that have one
        self.counts = counts if counts is not None else PacingCounts()  # the surface's, shared
        self._clock = clock
        self._sleep = sleep
        self._not_before = -math.inf  # a 429's penalty runs until then
        self._calls = anyio.Lock()  # fair: calls go in the order they asked; one at a time
        self._ready = -math.inf  # no call may start before this: the previous one ended
        self._users = 0  # callers waiting or inside `call`, live replies `held`

    def _wait(self, optional: bool) -> float:
        """Seconds until a call may start (<= 0: now)."""
        now = self._clock()
        wait = max(self._ready, self._not_before) - now
        if optional and self.window is not None:
            wait = max(wait, self.window.optional_wait(now))
        return wait

    @asynccontextmanager
    async def call(self, *, optional: bool = False) -> AsyncIterator[None]:
        """Wait for this chat's turn to call the platform, then run the body (the call); when it
        ends, by returning or raising, the next call may start `min_interval` later. `optional`:
        a call the chat can do without (a live update), which also waits for the group's window.
        A 429 the body raises is recorded. A caller cancelled while waiting leaves no trace."""
        self._users += 1
        try:
            async with self._calls:
                # Re-checked after every sleep: a 429 may have arrived meanwhile.
                while (delay := self._wait(optional)) > 0:
                    await self._sleep(delay)
                if self.window is not None:
                    self.window.record(self._clock())
                self.counts.calls += 1
                started = self._clock()
                try:
                    yield
                except RateLimited as limited:
                    self.record(limited)
                    raise
                finally:
                    since = started if self._from_start else self._clock()
                    self._ready = max(self._ready, since + self.min_interval)
        finally:
            self._users -= 1

    async def ready(self, *, optional: bool = False) -> None:
        """Sleep until a `call(optional=optional)` would start at once (no call in flight, none
        due to wait). Takes nothing: the call itself still passes `call`."""
        self._users += 1
        try:
            while True:
                async with self._calls:  # a call in flight ends first
                    delay = self._wait(optional)
                if delay <= 0:
                    return
                await self._sleep(delay)
        finally:
            self._users -= 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """Around a whole live reply that paces with this pacer: it is not idle meanwhile, so
        a prune never forgets it while the reply may still call (a new pacer for the same chat
        would not know of its calls)."""
        self._users += 1
        try:
            yield
        finally:
            self._users -= 1

    # -- 429s ----------------------------------------------------------------------------------

    def record(self, limited: RateLimited) -> None:
        """Hold the chat back for a 429, unless a pacer already did for this one."""
        if not limited.recorded:
            limited.recorded = True
            self.counts.rate_limited += 1
            self.penalize(limited.retry_after)

    def penalize(self, retry_after: float) -> None:
        """Nothing happens in this chat for `retry_after` seconds (the platform said so)."""
        self._not_before = max(self._not_before, self._clock() + max(retry_after, 0.0))

    def is_penalized(self) -> bool:
        return self._clock() < self._not_before

    def is_idle(self) -> bool:
        """Nobody waiting and nothing left to wait for: a new pacer would behave the same."""
        now = self._clock()
        return (
            self._users == 0
            and max(self._ready, self._not_before) <= now
            and (self.window is None or self.window.is_idle(now))
        )


class Pacing:
    """The `ChatPacer` of every chat of one surface, made on first use and forgotten when idle.
    `group_window(chat)` gives the chats that have a per-group window theirs (None: none)."""

    def __init__(
        self,
        interval: float,
        *,
        prune_every: float = 60.0,
        group_window: Callable[[str], GroupWindow | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        from_start: bool = False,
    ) -> None:
        self.interval = interval
        self._from_start = from_start  # see ChatPacer
        self._prune_every = prune_every
        self._group_window = group_window
        self._clock = clock  # the pacers' time: a test's own clock, or the monotonic one
        self._sleep = sleep
        self._chats: dict[str, ChatPacer] = {}
        self.counts = PacingCounts()  # every chat's pacer adds to it
        self._next_prune = clock() + prune_every
        self._prune_at_size = _PRUNE_MIN_SIZE  # prune once this many chats are remembered

    def __len__(self) -> int:
        """How many chats are remembered."""
        return len(self._chats)

    def for_chat(self, chat: str) -> ChatPacer:
        """The chat's pacer (`ConversationKey.chat`: threads of a chat share it)."""
        pacer = self._chats.get(chat)
        if pacer is None:
            if len(self._chats) >= self._prune_at_size or self._clock() >= self._next_prune:
                self.prune()
            window = self._group_window(chat) if self._group_window is not None else None
            pacer = self._chats[chat] = ChatPacer(
                self.interval,
                window=window,
                clock=self._clock,
                sleep=self._sleep,
                counts=self.counts,
                from_start=self._from_start,
            )
        return pacer

    def call(self, chat: str, *, optional: bool = False) -> AbstractAsyncContextManager[None]:
        """`async with pacing.call(chat):` around one platform call (see `ChatPacer.call`)."""
        if self._clock() >= self._next_prune:
            self.prune()
        return self.for_chat(chat).call(optional=optional)

    def penalize(self, chat: str, seconds: float) -> None:
        """Hold every call and turn of `chat` back for `seconds` from now."""
        self.for_chat(chat).penalize(seconds)

    def prune(self) -> None:
        """Forget the chats whose pacers are idle: they are as good as new."""
        self._next_prune = self._clock() + self._prune_every
        for chat in [chat for chat, pacer in self._chats.items() if pacer.is_idle()]:
            del self._chats[chat]
        self._prune_at_size = max(_PRUNE_MIN_SIZE, 2 * len(self._chats))


class GlobalBudget:
    """A budget for a whole surface: calls `1/rate` seconds apart, slots handed out by priority
    (lower first: new messages, so the first text shows soon, before edits) and then in order.
    `take_if_free` is for calls worth making only when a slot is free at once (typing);
    `take_unless_queued` for calls worth a short wait but never a place in a queue (live edits)."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = -math.inf  # when the next slot is free
        self._waiting: list[list[Any]] = []  # heap of [priority, order, wake-up event]
        self._order = itertools.count()

    def take_if_free(self) -> bool:
        now = time.monotonic()
        if self._waiting or now < self._next:
            return False
        self._next = self._after(now)
        return True

    def _after(self, now: float) -> float:
        """When the slot after one taken `now` is free. A slot taken less than an interval late
        (a busy loop woke its caller late) still counts from when it was free, so lateness does
        not eat into the rate; after a longer idle spell the count starts afresh from now."""
        start = self._next if now - self._next < self._interval else now
        return start + self._interval

    async def take_unless_queued(self, priority: int) -> bool:
        """With no other call waiting, wait for the next slot at `priority` (more urgent calls
        that come meanwhile still go first) and take it (True); otherwise refuse at once (False),
        so the slots go to the calls already waiting."""
        if self._waiting:
            return False
        await self.take(priority)
        return True

    async def take(self, priority: int) -> None:
        if not self._interval:
            return
        entry: list[Any] = [priority, next(self._order), anyio.Event()]
        heapq.heappush(self._waiting, entry)
        try:
            while True:
                if self._waiting[0] is entry:
                    wait = self._next - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._waiting)
                        self._next = self._after(time.monotonic())
                        return
                    with anyio.move_on_after(wait):
                        await entry[2].wait()
                else:
                    await entry[2].wait()
                entry[2] = anyio.Event()
        finally:
            if entry in self._waiting:  # cancelled while waiting
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            if self._waiting:
                self._waiting[0][2].set()  # the next in line checks its turn
