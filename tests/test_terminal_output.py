"""A terminal's output as Switchboard reads and keeps it (acp/terminal_output.py): the agent's
terminals together are read at a bounded rate (a command printing without pause waits in its
write instead of spending Switchboard's CPU), and the kept tail is the last bytes, whole
characters, whatever the chunks."""

from __future__ import annotations

import pytest

from acp.terminal_output import OutputTail, ReadBudget
from tests.harness.clock import FakeClock


@pytest.mark.anyio
async def test_reads_past_the_burst_wait_at_the_rate_and_time_refills_the_bucket() -> None:
    clock = FakeClock(100.0)
    budget = ReadBudget(rate=1000, burst=500, clock=clock, sleep=clock.sleep)
    await budget.spend(500)
    assert clock.waits == []  # the burst is read at once
    await budget.spend(250)
    assert clock.waits == [pytest.approx(0.25)]
    for _ in range(4):
        await budget.spend(1000)
    assert sum(clock.waits) == pytest.approx(4.25)  # 4,750 bytes at 1,000 a second, less the burst
    clock.now += 10  # quiet for a while: the bucket refills, but never past the burst
    clock.waits.clear()
    await budget.spend(500)
    await budget.spend(100)
    assert clock.waits == [pytest.approx(0.1)]


def test_the_tail_keeps_the_last_bytes_across_chunks_and_says_it_was_cut() -> None:
    tail = OutputTail(10)
    for part in (b"0123", b"4567", b"89ab", b"cdef"):
        tail.add(part)
    assert tail.data == b"6789abcdef"
    assert tail.truncated
    small = OutputTail(100)
    small.add(b"line one\nline two\n")
    assert (small.text(), small.truncated) == ("line one\nline two\n", False)
    assert small.last_line() == "line two"


def test_the_tail_never_starts_inside_a_character() -> None:
    tail = OutputTail(4)
    tail.add(b"ab")
    tail.add("é€".encode())  # 2 + 3 bytes: the last 4 would start inside é
    assert tail.text() == "€"


def test_a_flood_of_chunks_keeps_memory_to_the_limit_and_one_chunk() -> None:
    tail = OutputTail(1000)
    for _ in range(10_000):
        tail.add(b"y\n" * 32)
    assert len(tail.data) == 1000
    assert tail.last_line() == "y"
    assert sum(len(chunk) for chunk in tail._chunks) < 1000 + 64
