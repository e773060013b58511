"""A surface's pacing (surfaces/pacing.py): the per-chat call gate the adapters wrap their calls
in, and a 429 recorded once however many layers it passes through."""

from __future__ import annotations

import time

import anyio
import pytest

from surfaces.errors import RateLimited
from surfaces.pacing import ChatPacer, GroupWindow, Pacing
from tests.manual_clock import ManualClock

pytestmark = pytest.mark.anyio

INTERVAL = 0.05


async def test_the_next_call_starts_an_interval_after_the_previous_one_finished() -> None:
    gate = Pacing(INTERVAL)
    finished: list[float] = []
    started: list[float] = []

    async def slow_call() -> None:
        async with gate.call("chat"):
            started.append(time.monotonic())
            await anyio.sleep(2 * INTERVAL)  # longer than the interval: starts alone would overlap
            finished.append(time.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow_call)
        tg.start_soon(slow_call)

    assert len(started) == 2
    assert started[1] - finished[0] >= INTERVAL


async def test_a_penalty_holds_back_callers_already_queued() -> None:
    gate = Pacing(0.0)
    penalty = 4 * INTERVAL
    penalized_at = 0.0
    started: list[float] = []
    inside = anyio.Event()

    async def rate_limited() -> None:
        nonlocal penalized_at
        async with gate.call("chat"):
            inside.set()
            await anyio.sleep(INTERVAL)  # the others queue up meanwhile
            penalized_at = time.monotonic()
            gate.penalize("chat", penalty)

    async def queued() -> None:
        async with gate.call("chat"):
            started.append(time.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(rate_limited)
        await inside.wait()
        tg.start_soon(queued)
        tg.start_soon(queued)

    assert len(started) == 2
    assert min(started) - penalized_at >= penalty


async def test_keys_do_not_wait_for_each_other() -> None:
    gate = Pacing(10.0)  # a second call on the same key would take 10 s
    with anyio.fail_after(5):
        for chat in range(5):
            async with gate.call(chat):
                pass
        gate.penalize(99, 10.0)
        async with gate.call(100):
            pass


async def test_an_exception_in_the_call_still_spaces_the_next_one() -> None:
    gate = Pacing(INTERVAL)
    with pytest.raises(RuntimeError):
        async with gate.call("chat"):
            failed_at = time.monotonic()
            raise RuntimeError("the platform refused")
    async with gate.call("chat"):
        assert time.monotonic() - failed_at >= INTERVAL


async def test_pruning_forgets_idle_keys_but_not_busy_or_penalized_ones() -> None:
    gate = Pacing(0.0)
    async with gate.call("idle"):
        pass
    gate.penalize("penalized", 10.0)
    async with gate.call("busy"):
        gate.prune()
        assert len(gate) == 2  # "idle" is forgotten; "busy" is in a call, "penalized" must wait
    gate.prune()
    assert len(gate) == 1  # only "penalized" is left


async def test_calls_prune_the_gate_by_themselves_every_so_often() -> None:
    gate = Pacing(0.0, prune_every=INTERVAL)
    for chat in range(10):
        async with gate.call(chat):
            pass
    await anyio.sleep(INTERVAL)
    async with gate.call(-1):
        pass
    assert len(gate) == 1


async def test_many_new_chats_are_pruned_before_prune_every_has_passed() -> None:
    gate = Pacing(0.0, prune_every=3600.0)
    for chat in range(2000):
        async with gate.call(str(chat)):
            pass
        gate.for_chat(f"reply {chat}")  # the bot's reply streams ask for pacers too
    assert len(gate) <= 600  # only what arrived since the last prune (a few hundred at most)


async def test_a_pacer_held_by_a_reply_stream_is_not_pruned() -> None:
    gate = Pacing(0.0)
    pacer = gate.for_chat("streaming")
    with pacer.held():
        gate.prune()
        assert gate.for_chat("streaming") is pacer
    gate.prune()
    assert len(gate) == 0


async def test_a_429_raised_in_a_call_is_recorded_once_for_the_whole_chat() -> None:
    gate = Pacing(0.0)
    pacer = gate.for_chat("chat")
    with pytest.raises(RateLimited) as limited:
        async with gate.call("chat"):
            raise RateLimited(0.2)
    assert limited.value.recorded and pacer.is_penalized()
    before = pacer._not_before
    await anyio.sleep(0.01)
    pacer.record(limited.value)  # a layer above sees the same 429 on its way up
    assert pacer._not_before == before
    begun = time.monotonic()
    await pacer.ready()  # a live reply waiting for its turn waits for it too
    assert time.monotonic() - begun >= 0.15


async def test_a_penalty_holds_back_every_call_of_the_chat_including_waiting_ones() -> None:
    clock = ManualClock()
    pacer = ChatPacer(1.0, clock=clock, sleep=clock.sleep)
    async with pacer.call():
        pass
    started: list[float] = []

    async def waiter() -> None:
        async with pacer.call():
            started.append(clock.now)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        tg.start_soon(waiter)
        await clock.advance(0.5)
        pacer.penalize(10.0)  # arrives while both wait for their turn
        await clock.advance(1.0)
        assert started == []
        await clock.advance(9.0)
        await clock.advance(1.0)
    assert started == [10.5, 11.5] and not pacer.is_penalized()


async def test_ready_takes_no_turn_and_waits_for_the_call_in_flight_and_the_interval() -> None:
    clock = ManualClock()
    pacer = ChatPacer(1.0, clock=clock, sleep=clock.sleep)
    await pacer.ready()  # a new chat: at once
    ended = anyio.Event()
    readied: list[float] = []

    async def slow_call() -> None:
        async with pacer.call():
            await ended.wait()

    async def get_ready() -> None:
        await pacer.ready()
        readied.append(clock.now)

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow_call)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(get_ready)
        await clock.advance(5.0)
        assert readied == []  # the call is still in flight
        ended.set()
        await clock.advance(0.5)
        assert readied == []  # ... and then the interval runs from its end
        await clock.advance(0.5)
        assert readied == [6.0]
    async with pacer.call():  # ready took nothing: the call goes at once
        assert clock.now == 6.0


async def test_a_pacer_spaced_from_the_start_does_not_count_a_wait_inside_the_call() -> None:
    clock = ManualClock()
    starts: dict[bool, list[float]] = {True: [], False: []}
    for from_start in (True, False):
        pacer = ChatPacer(1.0, clock=clock, sleep=clock.sleep, from_start=from_start)
        began = clock.now

        async def calls(
            pacer: ChatPacer = pacer, from_start: bool = from_start, began: float = began
        ) -> None:
            for _ in range(2):
                async with pacer.call():
                    starts[from_start].append(clock.now - began)
                    await clock.sleep(0.75)  # the platform's own limiter, inside the call

        async with anyio.create_task_group() as tg:
            tg.start_soon(calls)
            for _ in range(12):  # 3 s: both calls and their waits are over by then
                await anyio.wait_all_tasks_blocked()
                await clock.advance(0.25)
    assert starts[True] == [0.0, 1.0]  # an interval after the first call began
    assert starts[False] == [0.0, 1.75]  # ... or after it ended, its wait counted again


async def test_optional_calls_in_a_group_wait_for_its_window_and_others_do_not() -> None:
    clock = ManualClock()
    window = GroupWindow(interval=3.0, per_minute=2)
    pacer = ChatPacer(0.0, window=window, clock=clock, sleep=clock.sleep)
    times: list[tuple[str, float]] = []

    async def call(name: str, optional: bool) -> None:
        async with pacer.call(optional=optional):
            times.append((name, clock.now))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "live 1", True)
        await clock.advance(0.0)
        tg.start_soon(call, "live 2", True)  # 3 s after the first
        await clock.advance(3.0)
        tg.start_soon(call, "final", False)  # not held by the minute's budget
        await clock.advance(0.0)
        tg.start_soon(call, "live 3", True)  # the minute's 2 are spent: a minute after live 2
        for _ in range(60):
            await clock.advance(1.0)
    assert times == [("live 1", 0.0), ("live 2", 3.0), ("final", 3.0), ("live 3", 63.0)]
