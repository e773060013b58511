"""The chunk clock and the in-process agent it drives, shared by bench/engine_concurrency.py and
bench/slack_streaming.py: every conversation's answer is C chunks on an absolute schedule, one
clock task emits everything due in one batch (a single write into the agent's stdout pipe, as a
real agent's write(2)), and the `Recorder` stamps when each chunk was produced and when a surface
first showed it. See engine_concurrency's docstring for what the figures mean."""

from __future__ import annotations

import array
import heapq
import itertools
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from bench._harness import percentile as _percentile
from bench._inprocess import InProcessProcess, method_not_found, opener_for, setup_response

CLOCK_RESOLUTION = 0.001  # chunks due within this are emitted in the same batch
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def chunk_text(seq: int, chars: int) -> str:
    """`chars` characters: filler, six digits, newline. The digits say which chunk this is."""
    pad = max(0, chars - 7)
    filler = (FILLER * (pad // len(FILLER) + 1))[:pad]
    return f"{filler}{seq:06d}\n"


async def sleep_until(at: float) -> None:
    """Sleep until `time.perf_counter()` reaches `at`, if it has not yet. The delay is read from
    the clock once and clamped: comparing one reading and sleeping on a later one's difference
    could ask for a small negative delay, which anyio rejects with ValueError."""
    delay = at - time.perf_counter()
    if delay > 0:
        await anyio.sleep(delay)


def last_seq(text: str) -> int:
    """The highest chunk number a shown text includes (chunks arrive in order), or -1."""
    end = len(text.rstrip())
    for line in reversed(text[max(0, end - 200) : end].split("\n")):
        digits = line.rstrip()[-6:]
        if len(digits) == 6 and digits.isdigit():
            return int(digits)
    return -1


# ---- what the surface saw ----------------------------------------------------------------------
class Recorder:
    """Production times per (conversation, chunk) and the lag of each chunk's first showing."""

    def __init__(self, conversations: int, chunks: int, interval: float) -> None:
        self.chunks = chunks
        self.interval = interval
        blank = array.array("d", [math.nan]) * chunks
        self.produced = [array.array("d", blank) for _ in range(conversations)]
        self.shown = [-1] * conversations
        self.last_call = [-math.inf] * conversations
        self.excess: array.array[float] = array.array("d")
        self.shown_at: array.array[float] = array.array("d")  # when each excess sample was shown
        self.raw: array.array[float] = array.array("d")
        self.call_excess: array.array[float] = array.array("d")
        self.slip: array.array[float] = array.array("d")
        self.calls = 0
        self.typing = 0
        self.unparsed: list[str] = []
        self.negative = 0
        self.most_negative = 0.0  # a big one would mean the pacer let edits come too close
        self.conversations_done = 0

    def on_call(self, conv: int, text: str, now: float) -> None:
        self.calls += 1
        prev = self.last_call[conv]
        self.last_call[conv] = now
        seq = last_seq(text)
        if seq < 0:
            if len(self.unparsed) < 5:
                self.unparsed.append(text[-200:])
            return
        shown = self.shown[conv]
        if seq <= shown:
            return
        not_before = prev + self.interval
        produced = self.produced[conv]
        first = True
        for k in range(shown + 1, min(seq, self.chunks - 1) + 1):
            p = produced[k]
            excess = now - (p if p > not_before else not_before)
            if excess < 0:
                self.negative += 1
                self.most_negative = min(self.most_negative, excess)
                excess = 0.0
            self.excess.append(excess)
            self.shown_at.append(now)
            self.raw.append(now - p)
            if first:
                self.call_excess.append(excess)
                first = False
        self.shown[conv] = seq

    def excess_by_second(self) -> list[float | None]:
        """p99 of the excess per second of the run (by when the chunk was shown), in ms."""
        if not self.shown_at:
            return []
        start = min(self.shown_at)
        buckets: dict[int, list[float]] = {}
        for at, excess in zip(self.shown_at, self.excess, strict=True):
            buckets.setdefault(int(at - start), []).append(excess)
        out: list[float | None] = []
        for second in range(max(buckets) + 1):
            p99 = _percentile(buckets.get(second, []), 0.99)
            out.append(None if p99 is None else round(p99 * 1000, 1))
        return out

    def complete(self) -> int:
        return sum(1 for seq in self.shown if seq == self.chunks - 1)


# ---- the chunk clock ---------------------------------------------------------------------------
class Stream:
    """One conversation's answer being produced."""

    __slots__ = (
        "cancelled",
        "conv",
        "done",
        "next",
        "prefix",
        "reply",
        "response",
        "start",
        "text",
    )

    def __init__(self, conv: int, start: float) -> None:
        self.conv = conv
        self.start = start
        self.next = 0
        self.cancelled = False
        self.prefix = b""  # engine: the session/update frame up to the chunk text
        self.response = b""  # engine: the session/prompt response, sent after the last chunk
        self.text = ""  # baseline: the reply so far
        self.reply: Any = None
        self.done = anyio.Event()


Flush = Callable[[list[tuple[Stream, int]]], Awaitable[None]]


class ChunkClock:
    """Emits chunk k of every stream at its start + k * gap, everything due in one batch."""

    def __init__(self, chunks: int, gap: float, recorder: Recorder, seed: int) -> None:
        self.chunks = chunks
        self.gap = gap
        self.recorder = recorder
        self.flush: Flush | None = None
        self.cpu = 0.0  # thread_time spent building batches
        self._heap: list[tuple[float, int, Stream]] = []
        self._order = itertools.count()
        self._added = anyio.Event()
        self._random = random.Random(seed)

    def add(self, conv: int) -> Stream:
        stream = Stream(conv, time.perf_counter() + self._random.uniform(0, self.gap))
        heapq.heappush(self._heap, (stream.start, next(self._order), stream))
        self._added.set()
        return stream

    async def run(self) -> None:
        assert self.flush is not None
        heap, slip = self._heap, self.recorder.slip
        last = self.chunks - 1
        while True:
            if not heap:
                await self._added.wait()
                self._added = anyio.Event()
                continue
            now = time.perf_counter()
            wait = heap[0][0] - now
            if wait > CLOCK_RESOLUTION:  # positive: computed from one reading
                with anyio.move_on_after(wait):
                    await self._added.wait()
                if self._added.is_set():
                    self._added = anyio.Event()
                continue
            cpu = time.thread_time()
            batch: list[tuple[Stream, int]] = []
            horizon = now + CLOCK_RESOLUTION
            while heap and heap[0][0] <= horizon:
                due, _, stream = heapq.heappop(heap)
                if stream.cancelled:
                    continue
                seq = stream.next
                stream.next = seq + 1
                slip.append(now - due if now > due else 0.0)
                batch.append((stream, seq))
                if seq < last:
                    when = stream.start + (seq + 1) * self.gap
                    heapq.heappush(heap, (when, next(self._order), stream))
            self.cpu += time.thread_time() - cpu
            await self.flush(batch)


# ---- the in-process agent ----------------------------------------------------------------------
_CHUNK_HEAD = (
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"%s","update":'
    b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
)
_CHUNK_TAIL = b'"}}}}\n'


class InProcessAgent:
    """An ACP agent in coroutines: initialize, session/new, session/prompt (answered with the
    clock's chunks, then end_turn), session/cancel. Reads and writes NDJSON like a process."""

    def __init__(self, clock: ChunkClock, chunk_chars: int) -> None:
        self.clock = clock
        self.scope = anyio.CancelScope()
        self.process = InProcessProcess(self.scope.cancel)
        self.cpu = 0.0
        self.cancels = 0
        self.texts = [
            json.dumps(chunk_text(k, chunk_chars))[1:-1].encode() for k in range(clock.chunks)
        ]
        self._sessions = itertools.count()
        self._streams: dict[str, Stream] = {}
        self._last = clock.chunks - 1
        clock.flush = self._flush

    async def _flush(self, batch: list[tuple[Stream, int]]) -> None:
        cpu = time.thread_time()
        texts, last = self.texts, self._last
        parts: list[bytes] = []
        for stream, seq in batch:
            parts += (stream.prefix, texts[seq], _CHUNK_TAIL)
            if seq == last:
                parts.append(stream.response)
        data = b"".join(parts)
        produced = self.clock.recorder.produced
        now = time.perf_counter()
        for stream, seq in batch:
            produced[stream.conv][seq] = now
        self.cpu += time.thread_time() - cpu
        await self.process.agent_stdout.send(data)

    async def run(self) -> None:
        try:
            with self.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self.clock.run)
                    await self._read(tg)
                    tg.cancel_scope.cancel()
        finally:
            await self.process.agent_exits()

    async def _read(self, tg: anyio.abc.TaskGroup) -> None:
        buffer = b""
        while True:
            try:
                data = await self.process.agent_stdin.receive(256 * 1024)
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return  # stdin closed: the client is done with us
            cpu = time.thread_time()
            *lines, buffer = (buffer + data).split(b"\n")
            replies = [self._handle(json.loads(line)) for line in lines if line.strip()]
            self.cpu += time.thread_time() - cpu
            for reply in replies:
                if reply:
                    await self.process.agent_stdout.send(reply)

    def _handle(self, message: dict[str, Any]) -> bytes:
        """One frame from the client -> the line(s) to answer with now (b"" for none)."""
        method, request_id = message.get("method"), message.get("id")
        params: Any = message.get("params")
        setup = setup_response(message, "in-process-bench-agent", self._sessions)
        if setup is not None:
            return json.dumps(setup).encode() + b"\n"
        if method == "session/prompt":
            session_id = params["sessionId"]
            text = params["prompt"][0]["text"]
            stream = self.clock.add(int(text.split()[-1]))
            stream.prefix = _CHUNK_HEAD % session_id.encode()
            stream.response = (
                b'{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}\n'
                % json.dumps(request_id).encode()
            )
            self._streams[session_id] = stream
        elif method == "session/cancel":
            running = self._streams.get(params.get("sessionId"))
            if running is not None and not running.cancelled:
                running.cancelled = True
                self.cancels += 1
                return running.response.replace(b"end_turn", b"cancelled")
        elif request_id is not None:
            return json.dumps(method_not_found(request_id)).encode() + b"\n"
        return b""


def in_process_opener(clock: ChunkClock, chunk_chars: int, agents: list[InProcessAgent]) -> Any:
    """An opener whose agents (each appended to `agents`) answer with `clock`'s chunks."""

    def make_agent() -> InProcessAgent:
        agent = InProcessAgent(clock, chunk_chars)
        agents.append(agent)
        return agent

    return opener_for(make_agent)
