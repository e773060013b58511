#!/usr/bin/env python3
"""Whether a chat turn keeps its reply text in linear time, however many chunks it arrives in.

    python bench/reply_text.py [--chunks N] [--size CHARS] [--reps R]

N chunks of CHARS characters each (default 80,000 of 5) go through `LiveOutput.on_text`, the
bot's one text accumulator (bot/turn_output.py), while its feeder hands the growing text to a
stand-in reply stream, then the final text is read once, as the turn does. Two ways in:

* flood: every chunk at once, with no task switch between them (chunks a frame reader takes
  on its own stack);
* trickle: a task switch after every chunk (each chunk its own read: the feeder could run
  between any two of them, which is the worst case for it).

Each is set against a baseline doing the least any accumulator must (a list append per chunk,
the same task switches, one join at the end), and, for reference, against the text grown with
`+=` on an attribute and handed to the stream per chunk (what the turn did before: quadratic).
The report gives the best time of R runs per way and the ratio ours/baseline (linear: it stays
about the same as N grows; try --chunks 160000). No target is asserted: exit status 0 whenever
the final text came out whole.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.reply import ReplyStream  # noqa: E402
from bot.services import ConversationServices  # noqa: E402
from bot.turn_output import LiveOutput  # noqa: E402
from surfaces.base import ConversationKey, Surface, UserRef  # noqa: E402


class _Stream:
    """Stands in for the reply stream: keeps the latest text, as `ReplyStream.update` does."""

    def __init__(self) -> None:
        self.text = ""
        self.updates = 0

    def update(self, text: str) -> None:
        self.text = text
        self.updates += 1

    def set_status(self, text: str | None) -> None:
        return None


class _Histogram:
    def observe(self, value: float) -> None:
        return None


class _Metrics:
    first_text = _Histogram()


class _Services:
    """What `LiveOutput` uses of the app: the metrics and a task group to run its feeder in."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self.metrics = _Metrics()
        self._tg = tg

    def spawn(self, job: Any) -> None:
        self._tg.start_soon(job)


async def _ours(chunks: list[str], trickle: bool) -> tuple[float, str]:
    stream = _Stream()
    async with anyio.create_task_group() as tg:
        output = LiveOutput(
            cast(ConversationServices, _Services(tg)),
            cast(Surface, None),
            ConversationKey("bench", "chat"),
            cast(ReplyStream, stream),
            UserRef("alice"),
        )
        output.show_live(3600.0)
        started = time.perf_counter()
        for chunk in chunks:
            output.on_text(chunk)
            if trickle:
                await anyio.lowlevel.checkpoint()
        final = output.text
        elapsed = time.perf_counter() - started
        output.stop_live()
    return elapsed, final


async def _baseline(chunks: list[str], trickle: bool) -> tuple[float, str]:
    parts: list[str] = []
    started = time.perf_counter()
    for chunk in chunks:
        parts.append(chunk)
        if trickle:
            await anyio.lowlevel.checkpoint()
    final = "".join(parts)
    return time.perf_counter() - started, final


class _Grown:
    def __init__(self) -> None:
        self.text = ""


async def _before(chunks: list[str], trickle: bool) -> tuple[float, str]:
    stream, grown = _Stream(), _Grown()
    started = time.perf_counter()
    for chunk in chunks:
        grown.text += chunk
        stream.update(grown.text)
        if trickle:
            await anyio.lowlevel.checkpoint()
    return time.perf_counter() - started, grown.text


async def _best(way: Any, chunks: list[str], trickle: bool, reps: int) -> tuple[float, bool]:
    whole = "".join(chunks)
    best, right = float("inf"), True
    for _ in range(reps):
        elapsed, final = await way(chunks, trickle)
        best, right = min(best, elapsed), right and final == whole
    return best, right


async def _main(count: int, size: int, reps: int) -> int:
    chunks = [f"{i % 10}" * size for i in range(count)]
    print(f"{count} chunks of {size} characters, best of {reps}")
    whole = True
    for mode, trickle in (("flood", False), ("trickle", True)):
        base, ok_base = await _best(_baseline, chunks, trickle, reps)
        ours, ok_ours = await _best(_ours, chunks, trickle, reps)
        before, ok_before = await _best(_before, chunks, trickle, 1)
        whole = whole and ok_base and ok_ours and ok_before
        print(
            f"{mode:8} baseline {base:8.4f} s  ours {ours:8.4f} s  ratio {ours / base:6.2f}"
            f"  (+= per chunk: {before:8.4f} s, ratio {before / base:7.1f})"
        )
    return 0 if whole else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=80_000)
    parser.add_argument("--size", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    return anyio.run(_main, args.chunks, args.size, args.reps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
