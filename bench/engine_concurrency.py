#!/usr/bin/env python3
"""How well the whole engine keeps up with many conversations streaming at once.

    python bench/engine_concurrency.py [--conversations 1000] [--chunks 200] [--interval 1.0]
                                       [--chunk-gap 0.05] [--chunk-chars 20] [--ramp 1.0]
                                       [--timeout 600] [--only engine|baseline|projects]
                                       [--projects 20] [--caps 8,20]

Two sides, each in its own child process (so each peak RSS and CPU figure belongs to that side
alone), run one after the other:

* engine: the real `BotApp` (access check, de-duplication, routing, `ChatRunner`, `run_turn`,
  `ReplyStream`, `ChatPacer`, the SQLite state store in a temporary directory) serving one fake
  surface with N conversations. The agent is the only thing that is not real: it is an in-process
  ACP agent (coroutines) speaking NDJSON JSON-RPC over in-memory byte streams to a real
  `AcpRuntime`/`SessionHandle`/`AcpClient`, plugged in through `BotApp(..., opener=...)`, the seam
  `RuntimePool` uses to start agents (`open_runtime` spawns a process; this opener does not). As
  in production, one agent "process" (one runtime, one JSON-RPC connection) serves every
  conversation, each in its own ACP session; the backend is kiro, the default.
* baseline: the same surface, conversations and chunk schedule, but the chunks go straight into a
  bare `open_reply`/`ReplyStream` per conversation (`update` with the whole text so far, then
  `finish`), each with its own `ChatPacer`: no agent, no ACP, no BotApp, no store.

* projects (once per `--caps` value, each SWITCHBOARD_MAX_AGENTS): the engine side's
  conversations spread over `--projects` real projects (SWITCHBOARD_PROJECTS, each its own
  workspace; conversation i's place bound to project i % P), so one agent per project, of which
  at most the cap live at once: the least recently used idle one makes room, and turns wait
  (told once) while all are busy. Reported besides the figures below: agents started, the most
  alive at once, turns that waited, and the ratios to the one-project engine run (lag p99, peak
  RSS, live agents, CPU, wall).

Each conversation is one prompt answered by C chunks of `--chunk-chars` characters (a filler
and a six-digit sequence number, ending in a newline, so whatever the surface is shown says which
chunks it includes). Chunk k of a conversation is due at start + k * `--chunk-gap` (an absolute
schedule; starts are jittered by up to one gap and ramped over `--ramp` seconds); one clock task
emits every due chunk in one batch and stamps its production time just before handing the batch
on (engine: one write into the agent's stdout pipe, as a real agent's write(2); baseline: the
`update` calls). The fake surface (`min_edit_interval = --interval`, 4096 characters per message,
editable) stamps every send/edit on entry.

Lag beyond pacing ("excess"), the headline figure. For a surface call on chat c at time t that
first shows chunk k (produced at p_k), with the previous send/edit on c at t_prev (-inf if none):

    excess_k = t - max(p_k, t_prev + interval)

`max(p_k, t_prev + interval)` is the earliest moment the pacer allowed chunk k to be shown: it
cannot be shown before it exists, nor before the chat's interval since the previous operation
has run. Whatever remains is time the engine took: event-loop queueing, JSON parsing, dispatch,
`run_turn`, the reply stream's wake-up, coalescing and splitting, the store's thread hops at the
end of a turn (the final text is written to the delivery ledger before it is sent). Every chunk
is one sample (a call that shows 20 new chunks gives 20 samples); values below zero (the pacer
stamps its turn a moment before the surface call it hands out) count as 0. Also reported: the raw
lag `t - p_k`, which includes the legitimate pacing wait, and a per-call variant (only the
oldest chunk each call newly shows).

Other figures per side: peak RSS (ru_maxrss) and RSS after imports; CPU seconds (getrusage
user+sys, every thread, i.e. also SQLite's worker threads) spent in the measured run, and the
part the in-process agent and the chunk clock themselves used (thread_time around their
synchronous work; it is in the engine process only because the agent is in-process; the
engine's own CPU is the difference); how late the chunk clock ran against its schedule ("slip":
the process could not keep up, so the load offered was lower than asked); and event-loop lag
(how late a 10 ms sleep wakes). Targets for the engine, printed, never asserted: excess p99 <=
50 ms up to 1,000 conversations and <= 100 ms beyond, peak RSS <= 300 MB, CPU per chunk <= 2.0x
the baseline's (`ratios.cpu`: both sides show the same chunks, so the CPU ratio is the per-chunk
ratio). The other ratios engine/baseline are given for context.

Prints human lines and one final JSON line. Exit status: 0 when both sides completed every
conversation with every chunk shown, whatever the figures; 1 otherwise. Each side is bounded by
--timeout (and killed a little after it); nothing outlives the command.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import gc
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# What the benches share lives in bench/_harness.py, bench/_inprocess.py and bench/_clocked.py.
from bench import _harness  # noqa: E402
from bench._clocked import (  # noqa: E402
    ChunkClock,
    InProcessAgent,
    Recorder,
    Stream,
    chunk_text,
    in_process_opener,
    sleep_until,
)
from bench._harness import cpu_seconds as _cpu_seconds  # noqa: E402
from bench._harness import peak_rss_mib as _peak_rss_mib  # noqa: E402
from bench._harness import percentile as _percentile  # noqa: E402
from bench._inprocess import engine_app  # noqa: E402

CHILD_TAG = "ENGINE_CONCURRENCY_RESULT "


def target_p99_ms(conversations: int) -> float:
    """The issue's targets: 50 ms up to 1,000 conversations, 100 ms beyond (stated at 2,000)."""
    return 50.0 if conversations <= 1000 else 100.0


TARGET_CPU_RATIO = 2.0  # CPU per chunk, engine over baseline (the same chunks in both)
TARGET_RSS_MB = 300.0  # megabytes, as stated; RSS is reported in MiB (300 MB = 286.1 MiB)
MAX_CHARS = 4096


def _dist_ms(values: array.array[float]) -> dict[str, Any]:
    ordered = sorted(values)
    out: dict[str, Any] = {"n": len(ordered)}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        v = _percentile(ordered, q)
        out[name] = None if v is None else round(v * 1000, 3)
    out["max"] = round(ordered[-1] * 1000, 3) if ordered else None
    return out


class BenchSurface:
    """A platform that answers at once and remembers nothing but the timing."""

    name = "bench"

    def __init__(self, recorder: Recorder, conversations: int, ramp: float, interval: float):
        from surfaces.base import SurfaceCapabilities

        self.recorder = recorder
        self.conversations = conversations
        self.ramp = ramp
        self.capabilities = SurfaceCapabilities(
            max_chars=MAX_CHARS, min_edit_interval=interval, can_edit=True
        )
        self._ids = itertools.count()

    async def run(self, on_event: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Every person sends one message (ramped); returns once every turn has finished."""
        from surfaces.base import ConversationKey, Inbound, UserRef

        # `on_event` returns once the message is accepted; `handled` is set when its turn ended.
        # (Older engines had no `handled` and returned when the turn ended.)
        has_handled = "handled" in {f.name for f in dataclasses.fields(Inbound)}

        async def converse(index: int) -> None:
            key = ConversationKey(self.name, f"c{index}")
            handled = anyio.Event()
            extra: dict[str, Any] = {"handled": handled} if has_handled else {}
            inbound = Inbound(key, UserRef(f"u{index}"), f"bench {index}", f"e{index}", **extra)
            await on_event(inbound)
            if has_handled:
                await handled.wait()
            self.recorder.conversations_done += 1

        async with anyio.create_task_group() as tg:
            task_status.started()
            started = time.perf_counter()
            for index in range(self.conversations):
                await sleep_until(started + self.ramp * index / self.conversations)
                tg.start_soon(converse, index)

    def render(self, markdown: str) -> str:
        return markdown

    async def send(self, key: Any, text: str, *, formatted: bool = False) -> Any:
        from surfaces.base import MessageRef

        self.recorder.on_call(int(key.chat[1:]), text, time.perf_counter())
        return MessageRef(key, str(next(self._ids)))

    async def edit(self, ref: Any, text: str, *, formatted: bool = False) -> None:
        self.recorder.on_call(int(ref.key.chat[1:]), text, time.perf_counter())

    def open_live(self, key: Any) -> Any:
        from surfaces.live import EditedLive

        return EditedLive(self, key)

    async def ask_choice(self, key: Any, prompt: str, choices: Any, *, allowed_users: Any) -> Any:
        raise AssertionError("the bench agent asks no permission")

    async def close_choice(self, ref: Any, prompt: str, outcome: str) -> None:
        return None

    async def typing(self, key: Any) -> None:
        self.recorder.typing += 1

    def command_menu(self, commands: Any) -> None:
        return None

    async def close(self) -> None:
        return None


# ---- the children ------------------------------------------------------------------------------
class GcPauses:
    """Time spent in each garbage collection, by generation (a full collection of a big heap
    stops the event loop)."""

    def __init__(self) -> None:
        self.pauses: list[list[float]] = [[], [], []]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def summary(self) -> dict[str, Any]:
        return {
            f"gen{gen}": {
                "count": len(pauses),
                "total_ms": round(sum(pauses) * 1000, 1),
                "max_ms": round(max(pauses, default=0.0) * 1000, 1),
            }
            for gen, pauses in enumerate(self.pauses)
        }


class LoopLag:
    """How late a 10 ms sleep wakes: the event loop's queueing delay."""

    def __init__(self) -> None:
        self.lag: array.array[float] = array.array("d")

    async def run(self) -> None:
        while True:
            before = time.perf_counter()
            await anyio.sleep(0.01)
            self.lag.append(max(0.0, time.perf_counter() - before - 0.01))


async def _engine(args: argparse.Namespace, rec: Recorder, clock: ChunkClock) -> dict[str, Any]:
    agents: list[InProcessAgent] = []
    surface = BenchSurface(rec, args.conversations, args.ramp, args.interval)
    opener = in_process_opener(clock, args.chunk_chars, agents)
    async with engine_app(
        "engine-concurrency-", surface.name, args.conversations, args.timeout, opener
    ) as app:
        await app.serve([surface], anyio.Event())
    return {
        "agents_started": len(agents),
        "peak_live_agents": len(agents),
        "agent_cpu_s": round(sum(agent.cpu for agent in agents) + clock.cpu, 3),
        "agent_cancels": sum(agent.cancels for agent in agents),
    }


# ---- many projects: one agent per workspace, at most --max-agents live --------------------------
class _PoolAgent(InProcessAgent):
    """The bench agent for one workspace of many: the chunk clock is shared (one task emits every
    agent's due chunks), so the agent neither runs it nor takes over its output; `_Agents` hands
    each agent its own streams' chunks."""

    def __init__(self, clock: ChunkClock, chunk_chars: int, agents: _Agents) -> None:
        flush = clock.flush
        super().__init__(clock, chunk_chars)
        clock.flush = flush
        self._agents = agents

    async def run(self) -> None:
        try:
            with self.scope:
                await self._read_only()
        finally:
            await self.process.agent_exits()

    async def _read_only(self) -> None:
        async with anyio.create_task_group() as tg:
            await self._read(tg)
            tg.cancel_scope.cancel()

    def _handle(self, message: dict[str, Any]) -> bytes:
        if message.get("method") == "session/prompt":
            self._agents.owner[int(message["params"]["prompt"][0]["text"].split()[-1])] = self
        return super()._handle(message)


class _Agents:
    """Every in-process agent of a projects run, which conversation's stream is whose, and how
    many are alive (the figure the cap bounds)."""

    def __init__(self, clock: ChunkClock, chunk_chars: int) -> None:
        self.clock = clock
        self.chunk_chars = chunk_chars
        self.started: list[_PoolAgent] = []
        self.owner: dict[int, _PoolAgent] = {}
        self.live = 0
        self.peak_live = 0
        clock.flush = self._flush

    async def _flush(self, batch: list[tuple[Stream, int]]) -> None:
        parts: dict[int, tuple[_PoolAgent, list[tuple[Stream, int]]]] = {}
        for stream, seq in batch:
            agent = self.owner[stream.conv]
            parts.setdefault(id(agent), (agent, []))[1].append((stream, seq))
        for agent, part in parts.values():
            await agent._flush(part)

    def opener(self) -> Any:
        from contextlib import asynccontextmanager

        from bench._inprocess import opener_for

        inner = opener_for(self._make)

        @asynccontextmanager
        async def counted(spec: Any) -> Any:
            self.live += 1
            self.peak_live = max(self.peak_live, self.live)
            try:
                async with inner(spec) as runtime:
                    yield runtime
            finally:
                self.live -= 1

        return counted

    def _make(self) -> _PoolAgent:
        agent = _PoolAgent(self.clock, self.chunk_chars, self)
        self.started.append(agent)
        return agent


async def _bind_places(app: Any, conversations: int, projects: int) -> None:
    """Conversation c<i> lands in project i % `projects`: its place is bound to it, as an admin's
    `/project bind NAME` there would."""
    from surfaces.base import ConversationKey

    for index in range(conversations):
        await app.store.put_place(
            ConversationKey(BenchSurface.name, f"c{index}"), _project_name(index % projects)
        )


def _project_name(index: int) -> str:
    return f"project-{index:02d}"


async def _projects(args: argparse.Namespace, rec: Recorder, clock: ChunkClock) -> dict[str, Any]:
    """The same conversations spread over `--projects` real projects (SWITCHBOARD_PROJECTS),
    each its own workspace and so its own agent, at most `--max-agents` alive."""
    import tempfile

    agents = _Agents(clock, args.chunk_chars)
    surface = BenchSurface(rec, args.conversations, args.ramp, args.interval)
    with tempfile.TemporaryDirectory(prefix="engine-concurrency-workspaces-") as root:
        projects = {}
        for index in range(args.projects):
            workspace = Path(root) / _project_name(index)
            workspace.mkdir()
            projects[_project_name(index)] = {"workspace": str(workspace), "agent": "kiro"}
        async with engine_app(
            "engine-concurrency-projects-",
            surface.name,
            args.conversations,
            args.timeout,
            agents.opener(),
            max_agents=args.max_agents,
            projects=projects,
            default_project=_project_name(0),
        ) as app:
            await _bind_places(app, args.conversations, args.projects)
            waits = _WaitLines(surface)
            async with anyio.create_task_group() as tg:
                tg.start_soon(clock.run)
                await app.serve([surface], anyio.Event())
                tg.cancel_scope.cancel()
    return {
        "projects": args.projects,
        "max_agents": args.max_agents,
        "agents_started": len(agents.started),
        "peak_live_agents": agents.peak_live,
        "wait_lines": waits.count,
        "agent_cpu_s": round(sum(agent.cpu for agent in agents.started) + clock.cpu, 3),
        "agent_cancels": sum(agent.cancels for agent in agents.started),
    }


class _WaitLines:
    """Counts the messages saying a turn waits for a free agent (the surface's sends)."""

    def __init__(self, surface: BenchSurface) -> None:
        self.count = 0
        send = surface.send

        async def counting(key: Any, text: str, *, formatted: bool = False) -> Any:
            if "busy" in text and "waits" in text:
                self.count += 1
            return await send(key, text, formatted=formatted)

        surface.send = counting  # type: ignore[method-assign]


async def _baseline(args: argparse.Namespace, rec: Recorder, clock: ChunkClock) -> dict[str, Any]:
    from bot.reply import open_reply
    from surfaces.base import ConversationKey
    from surfaces.pacing import ChatPacer

    surface = BenchSurface(rec, args.conversations, args.ramp, args.interval)
    texts = [chunk_text(k, args.chunk_chars) for k in range(args.chunks)]
    last = args.chunks - 1

    async def flush(batch: list[tuple[Stream, int]]) -> None:
        cpu = time.thread_time()
        produced = rec.produced
        now = time.perf_counter()
        for stream, seq in batch:
            produced[stream.conv][seq] = now
        clock.cpu += time.thread_time() - cpu
        for stream, seq in batch:  # the stream handed the whole text per chunk
            stream.text += texts[seq]
            stream.reply.update(stream.text)
            if seq == last:
                stream.done.set()

    clock.flush = flush

    async def converse(index: int) -> None:
        key = ConversationKey(surface.name, f"c{index}")
        async with open_reply(surface, key, ChatPacer(args.interval)) as reply:
            stream = clock.add(index)
            stream.reply = reply
            await stream.done.wait()
            await reply.finish(stream.text.strip("\n"))
        rec.conversations_done += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.run)
        async with anyio.create_task_group() as conversations:
            started = time.perf_counter()
            for index in range(args.conversations):
                await sleep_until(started + args.ramp * index / args.conversations)
                conversations.start_soon(converse, index)
        tg.cancel_scope.cancel()
    return {"agents_started": 0, "agent_cpu_s": round(clock.cpu, 3)}


def child(side: str, args: argparse.Namespace) -> None:
    # Imports first, so "after imports" is the floor each side starts from.
    import bot.app
    import bot.reply  # noqa: F401

    rss_before = _peak_rss_mib()
    rec = Recorder(args.conversations, args.chunks, args.interval)
    clock = ChunkClock(args.chunks, args.chunk_gap, rec, seed=1)
    loop = LoopLag()
    gc_pauses = GcPauses()
    gc.callbacks.append(gc_pauses)
    phase = {"engine": _engine, "baseline": _baseline, "projects": _projects}[side]
    result: dict[str, Any] = {"side": side}

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            with anyio.fail_after(args.timeout):
                result.update(await phase(args, rec, clock))
            tg.cancel_scope.cancel()

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    try:
        anyio.run(run, backend="asyncio")
    except TimeoutError:
        result["error"] = f"did not finish within {args.timeout:g} s"
    cpu, wall = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{args.profile}.{side}")
    chunks_total = args.conversations * args.chunks
    result.update(
        conversations=args.conversations,
        conversations_done=rec.conversations_done,
        complete=rec.complete(),
        chunks_shown=len(rec.excess),
        chunks_total=chunks_total,
        excess_ms=_dist_ms(rec.excess),
        raw_lag_ms=_dist_ms(rec.raw),
        call_excess_ms=_dist_ms(rec.call_excess),
        slip_ms=_dist_ms(rec.slip),
        loop_lag_ms=_dist_ms(loop.lag),
        excess_p99_ms_by_second=rec.excess_by_second(),
        gc=gc_pauses.summary(),
        clamped_negative=rec.negative,
        most_negative_ms=round(rec.most_negative * 1000, 3),
        surface_calls=rec.calls,
        typing_calls=rec.typing,
        unparsed_calls=rec.unparsed,
        wall_s=round(wall, 3),
        cpu_s=round(cpu, 3),
        cpu_us_per_chunk=round(cpu / chunks_total * 1e6, 2),
        rss_before_mib=round(rss_before, 1),
        peak_rss_mib=round(_peak_rss_mib(), 1),
    )
    if "error" not in result and result["complete"] != args.conversations:
        result["error"] = (
            f"{result['complete']} of {args.conversations} conversations showed every chunk"
        )
    print(CHILD_TAG + json.dumps(result), flush=True)


# ---- parent ------------------------------------------------------------------------------------
def run_child(
    side: str, args: argparse.Namespace, timeout: float, max_agents: int = 8
) -> dict[str, Any]:
    label = f"{side}-cap{max_agents}" if side == "projects" else side
    cmd = [
        "--child",
        side,
        "--projects",
        str(args.projects),
        "--max-agents",
        str(max_agents),
        "--conversations",
        str(args.conversations),
        "--chunks",
        str(args.chunks),
        "--interval",
        repr(args.interval),
        "--chunk-gap",
        repr(args.chunk_gap),
        "--chunk-chars",
        str(args.chunk_chars),
        "--ramp",
        repr(args.ramp),
        "--timeout",
        f"{timeout:.3f}",
    ]
    if args.profile:
        cmd += ["--profile", args.profile]
    run = _harness.run_child(__file__, cmd, timeout + 20, capture_stderr=True)
    if run.timed_out:
        return {"side": label, "error": f"killed after {timeout + 20:.0f} s"}
    result = run.result(CHILD_TAG)
    if result is not None:
        result["side"] = label
        return result
    tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
    return {"side": label, "error": f"exit code {run.returncode}: {tail}"}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _show(result: dict[str, Any]) -> None:
    side = result["side"]
    if "excess_ms" not in result:
        print(f"  {side:8}: FAILED: {result.get('error')}", flush=True)
        return
    ex, raw, call = result["excess_ms"], result["raw_lag_ms"], result["call_excess_ms"]
    slip, loop = result["slip_ms"], result["loop_lag_ms"]
    if "peak_live_agents" in result and result["side"] != "baseline":
        print(
            f"  {side:8}: {result.get('projects', 1)} project(s), agents started"
            f" {result['agents_started']}, at most {result['peak_live_agents']} live at once"
            + (
                f" (cap {result['max_agents']}), {result['wait_lines']} turns waited for one"
                if "max_agents" in result
                else ""
            ),
            flush=True,
        )
    print(
        f"  {side:8}: {result['complete']}/{result['conversations']} conversations complete,"
        f" {result['chunks_shown']}/{result['chunks_total']} chunks shown,"
        f" {result['surface_calls']} surface calls, wall {result['wall_s']:.1f} s",
        flush=True,
    )
    print(
        f"            lag beyond pacing: p50 {_ms(ex['p50'])}, p90 {_ms(ex['p90'])},"
        f" p99 {_ms(ex['p99'])}, p99.9 {_ms(ex['p999'])}, max {_ms(ex['max'])}"
    )
    print(
        f"            raw lag (incl. pacing): p50 {_ms(raw['p50'])}, p99 {_ms(raw['p99'])};"
        f" per call (oldest new chunk): p50 {_ms(call['p50'])}, p99 {_ms(call['p99'])}"
    )
    print(
        f"            CPU {result['cpu_s']:.2f} s ({result['cpu_us_per_chunk']:.1f} us/chunk;"
        f" agent+clock {result['agent_cpu_s']:.2f} s), peak RSS {result['peak_rss_mib']:.1f} MiB"
        f" (after imports {result['rss_before_mib']:.1f} MiB)"
    )
    print(
        f"            chunk clock slip p99 {_ms(slip['p99'])} (max {_ms(slip['max'])});"
        f" event-loop lag p50 {_ms(loop['p50'])}, p99 {_ms(loop['p99'])},"
        f" max {_ms(loop['max'])}"
    )
    gc_stats = result["gc"]
    print(
        "            GC pauses: "
        + ", ".join(
            f"gen{g} {gc_stats[f'gen{g}']['count']}x max {gc_stats[f'gen{g}']['max_ms']:.0f} ms"
            for g in range(3)
        )
        + "; lag-beyond-pacing p99 per second: "
        + " ".join("-" if v is None else f"{v:.0f}" for v in result["excess_p99_ms_by_second"])
    )
    if result.get("error"):
        print(f"            ERROR: {result['error']}; unparsed: {result.get('unparsed_calls')}")


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=200, help="chunks per answer")
    ap.add_argument("--interval", type=float, default=1.0, help="surface min_edit_interval, s")
    ap.add_argument("--chunk-gap", type=float, default=0.05, help="seconds between chunks")
    ap.add_argument("--chunk-chars", type=int, default=20, help="characters per chunk (>= 7)")
    ap.add_argument("--ramp", type=float, default=1.0, help="seconds over which people write")
    ap.add_argument("--timeout", type=float, default=600.0, help="overall budget, seconds")
    ap.add_argument("--only", choices=["engine", "baseline", "projects"], help="run one side only")
    ap.add_argument(
        "--projects",
        type=int,
        default=20,
        help="projects run: the conversations spread over this many workspaces (0: no run)",
    )
    ap.add_argument(
        "--caps",
        default="8,20",
        help="projects run: SWITCHBOARD_MAX_AGENTS values, one run each (comma list)",
    )
    ap.add_argument("--max-agents", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="FILE", help="cProfile each side into FILE.<side>")
    ap.add_argument("--child", choices=["engine", "baseline", "projects"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.conversations < 1 or args.chunks < 1 or args.chunks > 999_999:
        ap.error("--conversations and --chunks must be positive (chunks < 1e6)")
    if args.chunk_chars < 7 or args.interval < 0 or args.chunk_gap < 0 or args.ramp < 0:
        ap.error("--chunk-chars must be >= 7; times must not be negative")

    if args.child:
        child(args.child, args)
        return 0

    try:
        caps = [int(cap) for cap in args.caps.split(",") if cap.strip()]
    except ValueError:
        ap.error("--caps must be a comma list of whole numbers")
    if any(cap < 1 for cap in caps) or args.projects < 0:
        ap.error("--caps must be positive, --projects not negative")
    deadline = time.monotonic() + args.timeout
    sides = [args.only] if args.only else ["baseline", "engine"]
    if args.projects and args.only in (None, "projects"):
        sides = [side for side in sides if side != "projects"]
        sides += [f"projects-cap{cap}" for cap in caps]
    print(
        f"engine concurrency: {args.conversations} conversations x {args.chunks} chunks"
        f" of {args.chunk_chars} chars every {args.chunk_gap:g} s,"
        f" surface min_edit_interval {args.interval:g} s",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    for index, side in enumerate(sides):
        left = (deadline - time.monotonic() - 25) / (len(sides) - index)
        if left <= 1:
            results[side] = {"side": side, "error": "overall timeout reached"}
        else:
            kind, _, cap = side.partition("-cap")
            results[side] = run_child(kind, args, left, int(cap or 8))
        _show(results[side])

    engine, baseline = results.get("engine"), results.get("baseline")
    target_p99 = target_p99_ms(args.conversations)
    verdict: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    if engine is not None and "excess_ms" in engine:
        p99 = engine["excess_ms"]["p99"]
        rss_mb = engine["peak_rss_mib"] * 1.048576
        verdict = {
            "excess_p99_ms": p99,
            "p99_meets_target": p99 is not None and p99 <= target_p99,
            "peak_rss_mb": round(rss_mb, 1),
            "rss_meets_target": rss_mb <= TARGET_RSS_MB,
        }
        print(
            f"engine targets: lag beyond pacing p99 {_ms(p99)}"
            f" ({'meets' if verdict['p99_meets_target'] else 'MISSES'} <= {target_p99:g} ms);"
            f" peak RSS {rss_mb:.1f} MB"
            f" ({'meets' if verdict['rss_meets_target'] else 'MISSES'} <= {TARGET_RSS_MB:g} MB)"
        )
    if engine and baseline and "excess_ms" in engine and "excess_ms" in baseline:
        ratios = {
            "excess_p50": _ratio(engine["excess_ms"]["p50"], baseline["excess_ms"]["p50"]),
            "excess_p99": _ratio(engine["excess_ms"]["p99"], baseline["excess_ms"]["p99"]),
            "peak_rss": _ratio(engine["peak_rss_mib"], baseline["peak_rss_mib"]),
            "rss_growth": _ratio(
                engine["peak_rss_mib"] - engine["rss_before_mib"],
                baseline["peak_rss_mib"] - baseline["rss_before_mib"],
            ),
            "cpu": _ratio(engine["cpu_s"], baseline["cpu_s"]),
            "cpu_minus_producers": _ratio(
                engine["cpu_s"] - engine["agent_cpu_s"], baseline["cpu_s"] - baseline["agent_cpu_s"]
            ),
        }
        print(
            "ratios engine/baseline: lag beyond pacing p50 {excess_p50}, p99 {excess_p99};"
            " peak RSS {peak_rss} (growth over imports {rss_growth});"
            " CPU {cpu} (without agent/clock {cpu_minus_producers})".format(**ratios)
        )
        cpu_ok = ratios["cpu"] is not None and ratios["cpu"] <= TARGET_CPU_RATIO
        verdict["cpu_ratio_meets_target"] = cpu_ok
        print(
            f"CPU per chunk engine/baseline {ratios['cpu']}"
            f" ({'meets' if cpu_ok else 'MISSES'} <= {TARGET_CPU_RATIO:g})"
        )
    single = results.get("engine")
    for side, result in results.items():
        if not side.startswith("projects") or "excess_ms" not in result:
            continue
        if single is None or "excess_ms" not in single:
            continue
        vs_single = {
            "excess_p99": _ratio(result["excess_ms"]["p99"], single["excess_ms"]["p99"]),
            "peak_rss": _ratio(result["peak_rss_mib"], single["peak_rss_mib"]),
            "live_agents": _ratio(result["peak_live_agents"], single["peak_live_agents"]),
            "cpu": _ratio(result["cpu_s"], single["cpu_s"]),
            "wall": _ratio(result["wall_s"], single["wall_s"]),
        }
        ratios[f"{side}/engine"] = vs_single
        print(
            f"ratios {side}/engine (one project): lag beyond pacing p99 {vs_single['excess_p99']};"
            f" peak RSS {vs_single['peak_rss']}; live agents {vs_single['live_agents']}"
            f" ({result['peak_live_agents']} vs {single['peak_live_agents']});"
            f" CPU {vs_single['cpu']}; wall {vs_single['wall']}"
        )
    failed = any("error" in r for r in results.values())
    print(
        json.dumps(
            {
                "bench": "engine_concurrency",
                "conversations": args.conversations,
                "chunks": args.chunks,
                "interval": args.interval,
                "chunk_gap": args.chunk_gap,
                "chunk_chars": args.chunk_chars,
                "ramp": args.ramp,
                "targets": {
                    "excess_p99_ms": target_p99,
                    "cpu_ratio": TARGET_CPU_RATIO,
                    "peak_rss_mb": TARGET_RSS_MB,
                },
                "verdict": verdict,
                "ratios": ratios,
                "results": results,
                "ok": not failed,
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
