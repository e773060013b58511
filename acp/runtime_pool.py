"""`RuntimePool`: any number of agent processes (`AcpRuntime`s), keyed by preset, command line
and workspace, each hosted by a task of the owner's task group: started on demand under its own
key's lock, at most `max_live` alive (the least recently used idle one stopped for room, else the
caller waits and is told once), reaped when idle, and `on_stop` told of each one the pool stops
by itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import anyio
import anyio.abc

from acp.runtime import AcpRuntime, RuntimeOpener, RuntimeSpec, open_runtime

log = logging.getLogger(__name__)
T = TypeVar("T")

# One runtime per (preset, command line, workspace): two agents of the same preset started by
# different commands are two agents, and one agent in two folders is two processes (an agent's
# session/new takes any cwd, but its fs/* and terminals are confined to the folder it runs in).
PoolKey = tuple[str, tuple[str, ...], Path]

# How often a turn waiting for a free agent looks again whether one became idle: nothing in the
# pool hears a turn end (the caller may say so with `notify_idle`); this bounds the wait past it.
IDLE_RECHECK = 0.1


def pool_key(spec: RuntimeSpec) -> PoolKey:
    return (spec.backend.name, spec.argv, spec.workspace.resolve())


def _always_idle(_value: Any) -> bool:
    return True


class _Waiter:
    """One `get`'s `on_wait`, said at most once, in the background: a conversation's delivery
    must neither hold up the pool nor, failing, reach the owner's task group."""

    __slots__ = ("on_wait", "told")

    def __init__(self, on_wait: Callable[[], Awaitable[None]] | None) -> None:
        self.on_wait = on_wait
        self.told = False

    def tell(self, tg: anyio.abc.TaskGroup) -> None:
        if self.told or self.on_wait is None:
            return
        self.told = True
        tg.start_soon(self._say, self.on_wait)

    @staticmethod
    async def _say(on_wait: Callable[[], Awaitable[None]]) -> None:
        try:
            await on_wait()
        except Exception:
            log.exception("unexpected fault while saying that a turn waits for an agent")


class _Slot:
    __slots__ = ("done", "last_used", "runtime", "stop", "value")

    def __init__(self) -> None:
        self.stop = anyio.Event()
        self.done = anyio.Event()
        self.runtime: AcpRuntime | None = None
        self.value: Any = None
        self.last_used = time.monotonic()


class RuntimePool(Generic[T]):
    """Agent processes keyed by `pool_key` (preset, command line, workspace), each hosted by a
    task of the owner's task group. `prepare` turns a fresh runtime into what callers use (e.g.
    an initialized client); a runtime that died is replaced on the next `get`. `opener` starts
    one (default: spawn the agent's process).

    Spawning takes a lock per key only: one slow agent start holds up nobody else's. With
    `max_live`, at most that many agent processes live (starting, serving or stopping): a new one
    first stops the least recently used idle one (`is_idle(value)`: the caller knows whether a
    turn runs on it), else waits until one is idle, telling each waiting caller once
    (`on_wait`).
    `reap_idle` stops runtimes unused for a while; `on_stop(value)` hears of every runtime the
    pool stops by itself (evicted or reaped), so callers drop what they hold of it."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        prepare: Callable[[AcpRuntime], Awaitable[T]],
        *,
        opener: RuntimeOpener = open_runtime,
        max_live: int | None = None,
        is_idle: Callable[[T], bool] = _always_idle,
        on_stop: Callable[[T], None] | None = None,
    ) -> None:
        if max_live is not None and max_live < 1:
            raise ValueError("max_live must be at least 1")
        self._tg = tg
        self._prepare = prepare
        self._opener = opener
        self._max_live = max_live
        self._is_idle = is_idle
        self._on_stop = on_stop
        self._slots: dict[PoolKey, _Slot] = {}
        self._locks: dict[PoolKey, anyio.Lock] = {}
        self._starting = 0
        self._stopping = 0
        self._changed = anyio.Event()
        # Gets queued behind a key's lock, and the keys whose start waits for room: all of
        # them are told, not only the one holding the lock.
        self._queued: dict[PoolKey, set[_Waiter]] = {}
        self._room_wait: set[PoolKey] = set()

    @property
    def live(self) -> int:
        """Agent processes counted against the cap: serving, being started or being stopped."""
        return len(self._slots) + self._starting + self._stopping

    async def get(
        self, spec: RuntimeSpec, *, on_wait: Callable[[], Awaitable[None]] | None = None
    ) -> T:
        """The live runtime for `spec`, started on demand. When its start must wait for a
        busy agent to become idle, `on_wait` is called once, in the background (also for the
        gets queued behind that start); the caller's deadline bounds the wait."""
        key = pool_key(spec)
        lock = self._locks.setdefault(key, anyio.Lock())
        waiter = _Waiter(on_wait)
        if key in self._room_wait:
            waiter.tell(self._tg)
        queued = self._queued.setdefault(key, set())
        queued.add(waiter)
        try:
            async with lock:
                return await self._get_locked(key, spec)
        finally:
            queued.discard(waiter)
            if not queued:
                self._queued.pop(key, None)

    async def _get_locked(self, key: PoolKey, spec: RuntimeSpec) -> T:
        slot = self._slots.get(key)
        if slot is not None and slot.runtime is not None and slot.runtime.alive:
            slot.last_used = time.monotonic()
            return cast(T, slot.value)
        if slot is not None:
            await self._stop(key, slot)
        await self._make_room(key)
        slot = _Slot()
        try:
            value: T = await self._tg.start(self._host, spec, slot)
        finally:
            self._starting -= 1
            self._wake()
        slot.last_used = time.monotonic()
        self._slots[key] = slot
        return value

    def runtimes(self) -> list[AcpRuntime]:
        """The runtimes serving now, least recently used first."""
        slots = sorted(self._slots.values(), key=lambda slot: slot.last_used)
        return [slot.runtime for slot in slots if slot.runtime is not None]

    def notify_idle(self) -> None:
        """Something may have become idle (a turn ended): a waiting `get` looks again now."""
        self._wake()

    async def discard(self, spec: RuntimeSpec) -> None:
        key = pool_key(spec)
        async with self._locks.setdefault(key, anyio.Lock()):
            slot = self._slots.get(key)
            if slot is not None:
                await self._stop(key, slot)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:  # each agent's ladder at once
                for key, slot in list(self._slots.items()):
                    tg.start_soon(self._stop, key, slot)

    async def reap_idle(self, idle_after: float) -> None:
        """Run by the owner: stop each runtime that nobody used for `idle_after` seconds. A
        runtime in use (a turn runs, a start or a `get` is under way) counts as used now."""
        while True:
            await anyio.sleep(min(60.0, idle_after / 2))
            now = time.monotonic()
            for key, slot in list(self._slots.items()):
                if self._slots.get(key) is not slot or slot.runtime is None:
                    continue
                if not self._stoppable(key, slot):
                    slot.last_used = now
                elif now - slot.last_used >= idle_after:
                    log.info(
                        "stopping the idle agent %s pid=%d in %s after %.0f s",
                        slot.runtime.backend.name,
                        slot.runtime.pid,
                        slot.runtime.workspace,
                        now - slot.last_used,
                    )
                    await self._stop(key, slot, told=True)

    def _stoppable(self, key: PoolKey, slot: _Slot) -> bool:
        lock = self._locks.get(key)
        if lock is not None and lock.locked():
            return False  # a `get` for it is under way: it is about to be used
        if slot.runtime is None or not slot.runtime.alive:
            return True
        return self._is_idle(cast(T, slot.value))

    def _victim(self) -> tuple[PoolKey, _Slot] | None:
        """Whom to stop for room: a dead runtime first, else the least recently used idle one."""
        candidates = [
            (key, slot) for key, slot in self._slots.items() if self._stoppable(key, slot)
        ]
        for key, slot in candidates:
            if slot.runtime is None or not slot.runtime.alive:
                return key, slot
        return min(candidates, key=lambda item: item[1].last_used, default=None)

    async def _make_room(self, key: PoolKey) -> None:
        """Reserve one place under the cap (counted in `_starting` until the start ends)."""
        try:
            await self._wait_for_room(key)
        finally:
            self._room_wait.discard(key)
        self._starting += 1

    async def _wait_for_room(self, key: PoolKey) -> None:
        while self._max_live is not None and self.live >= self._max_live:
            victim = self._victim()
            if victim is not None:
                victim_key, slot = victim
                if slot.runtime is not None:
                    log.info(
                        "stopping the least recently used idle agent pid=%d in %s: %d agents "
                        "is the limit",
                        slot.runtime.pid,
                        slot.runtime.workspace,
                        self._max_live,
                    )
                await self._stop(victim_key, slot, told=True)
                continue
            self._room_wait.add(key)
            for waiter in self._queued.get(key, ()):
                waiter.tell(self._tg)
            changed = self._changed
            with anyio.move_on_after(IDLE_RECHECK):
                await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _stop(self, key: PoolKey, slot: _Slot, *, told: bool = False) -> None:
        if self._slots.get(key) is slot:
            del self._slots[key]
        self._stopping += 1
        try:
            if told and self._on_stop is not None and slot.runtime is not None:
                try:
                    self._on_stop(cast(T, slot.value))
                except Exception:  # the caller's bookkeeping must not keep an agent alive
                    log.exception("unexpected fault while dropping a stopped agent's sessions")
            slot.stop.set()
            with anyio.CancelScope(shield=True):  # the ladder is bounded; the count must be true
                await slot.done.wait()
        finally:
            self._stopping -= 1
            self._wake()

    async def _host(
        self,
        spec: RuntimeSpec,
        slot: _Slot,
        *,
        task_status: anyio.abc.TaskStatus[T] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False
        try:
            async with self._opener(spec) as runtime:
                slot.value = await self._prepare(runtime)
                slot.runtime = runtime
                task_status.started(slot.value)
                started = True
                await slot.stop.wait()
        except Exception:
            if not started:  # the caller of `get` gets it: it belongs to that turn
                raise
            # The owner's task group hosts every runtime: a fault in one agent's pipe tasks ends
            # that agent (its turns fail as it being gone; the next `get` starts a new one), not
            # the owner.
            breadcrumbs = slot.runtime.breadcrumbs() if slot.runtime else ""
            log.exception("unexpected fault in a hosted agent; it was stopped [%s]", breadcrumbs)
        finally:
            slot.done.set()
