"""A surface's pacing (surfaces/pacing.py): the per-chat call gate the adapters wrap their calls
in, and a 429 recorded once however many layers it passes through."""

from __future__ import annotations

import time

import anyio
import pytest

from surfaces.errors import RateLimited
from surfaces.pacing import Pacing

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
    pacer.record(limited.value)  # the bot's reply stream sees the same 429 on its way up
    assert pacer._not_before == before
    begun = time.monotonic()
    await pacer.wait_turn()  # the bot's turns wait for it too
    assert time.monotonic() - begun >= 0.15
