#!/usr/bin/env python3
"""Whether the engine's memory follows the live conversations or every conversation it has met.

    python bench/conversation_churn.py [--conversations 20000] [--every 2000]
                                       [--concurrency 100] [--interval 0.2] [--timeout 300]

The real `BotApp` (access check, de-duplication, routing, `ChatRunner`, `run_turn`,
`ReplyStream`, the surface's `Pacing`, the SQLite state store in a temporary directory) serves
one fake surface on which N distinct people each send one message in their own chat, at most
`--concurrency` turns at a time. The agent is an in-process ACP agent (coroutines speaking NDJSON
JSON-RPC over in-memory pipes to a real `AcpRuntime`/`SessionHandle`/`AcpClient`, plugged in
through `BotApp(..., opener=...)`): one agent serves every conversation, each in its own ACP
session, and answers each prompt with one short chunk and end_turn. The surface answers at once
(`min_edit_interval = --interval`).

After every `--every` finished conversations the process collects garbage and reads its
resident set size (RSS, /proc/self/statm); it prints one line per reading, with how many
conversations are live in the app (runners), in the surface's pacing (pacers) and on the agent
client (session objects, inboxes, released sessions it can take up again).

The figure: `rss_growth_mb`, RSS at the last reading minus RSS at the first (2,000 to 20,000 by
default), target < 10 MB. The first reading is the baseline: by then the process has warmed up
(imports, the store, the agent, caches, a full population of live conversations), so what grows
after it is what conversations leave behind. `growth_bytes_per_conversation` spreads it over the
conversations in between; `rss_last_over_first` is the ratio of the two readings.

Runs in a child process (so the RSS is the engine's alone) bounded by --timeout (killed a little
after it). Prints human lines and one final JSON line. Exit status: 0 when every conversation
got its answer, whatever the figures; 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness  # noqa: E402
from bench._inprocess import (  # noqa: E402
    InProcessProcess,
    engine_app,
    method_not_found,
    opener_for,
    setup_response,
)

CHILD_TAG = "CONVERSATION_CHURN_RESULT "
TARGET_GROWTH_MB = 10.0  # megabytes, as stated; RSS is read in MiB
ANSWER = "Done."


def rss_mib() -> float:
    """The resident set size now (not the peak: memory handed back counts as gone)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


class ShortAgent:
    """An ACP agent in coroutines: initialize, session/new, and each session/prompt answered at
    once with one chunk of text and end_turn."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.process = InProcessProcess(self.scope.cancel)
        self.prompts = 0
        self._sessions = itertools.count()

    async def run(self) -> None:
        try:
            with self.scope:
                buffer = b""
                while True:
                    try:
                        data = await self.process.agent_stdin.receive(256 * 1024)
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        return  # stdin closed: the client is done with us
                    *lines, buffer = (buffer + data).split(b"\n")
                    for line in lines:
                        if line.strip():
                            reply = self._handle(json.loads(line))
                            if reply:
                                await self.process.agent_stdout.send(reply)
        finally:
            await self.process.agent_exits()

    def _handle(self, message: dict[str, Any]) -> bytes:
        """One frame from the client -> the line(s) to answer with now (b"" for none)."""
        setup = setup_response(message, "churn-bench-agent", self._sessions)
        if setup is not None:
            return json.dumps(setup).encode() + b"\n"
        method, request_id = message.get("method"), message.get("id")
        if method == "session/prompt":
            self.prompts += 1
            session_id = message["params"]["sessionId"]
            chunk = {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": ANSWER},
                    },
                },
            }
            done = {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
            return (json.dumps(chunk) + "\n" + json.dumps(done) + "\n").encode()
        if method == "session/cancel":
            return b""
        if request_id is not None:
            return json.dumps(method_not_found(request_id)).encode() + b"\n"
        return b""


class ChurnSurface:
    """A platform that answers at once; N people write one message each, `concurrency` turns at a
    time, and a reading is taken after every `every` finished conversations."""

    name = "bench"

    def __init__(self, args: argparse.Namespace, on_reading: Any) -> None:
        from surfaces.base import SurfaceCapabilities

        self.args = args
        self.on_reading = on_reading
        self.capabilities = SurfaceCapabilities(
            max_chars=4096, min_edit_interval=args.interval, can_edit=True
        )
        self._answered = bytearray(args.conversations)  # 1: the chat was shown the answer
        self.done = 0
        self._ids = itertools.count()

    async def run(self, on_event: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Every person sends one message; returns once every turn has finished."""
        from surfaces.base import ConversationKey, Inbound, UserRef

        limiter = anyio.CapacityLimiter(self.args.concurrency)
        next_reading = anyio.Event()

        async def converse(index: int) -> None:
            async with limiter:
                handled = anyio.Event()
                key = ConversationKey(self.name, f"c{index}")
                inbound = Inbound(key, UserRef(f"u{index}"), f"hi {index}", f"e{index}", handled)
                await on_event(inbound)
                await handled.wait()
            self.done += 1
            if self.done % self.args.every == 0:
                next_reading.set()

        task_status.started()
        total = self.args.conversations
        async with anyio.create_task_group() as tg:
            for start in range(0, total, self.args.every):
                next_reading = anyio.Event()
                for index in range(start, min(start + self.args.every, total)):
                    tg.start_soon(converse, index)
                await next_reading.wait()
                await self.on_reading(self.done)

    def render(self, markdown: str) -> str:
        return markdown

    async def send(self, key: Any, text: str, *, formatted: bool = False) -> Any:
        from surfaces.base import MessageRef

        if ANSWER in text:
            self._answered[int(key.chat[1:])] = 1
        return MessageRef(key, str(next(self._ids)))

    async def edit(self, ref: Any, text: str, *, formatted: bool = False) -> None:
        if ANSWER in text:
            self._answered[int(ref.key.chat[1:])] = 1

    @property
    def answered(self) -> int:
        """Conversations whose chat was shown the agent's answer."""
        return sum(self._answered)

    def open_live(self, key: Any) -> Any:
        from surfaces.live import EditedLive

        return EditedLive(self, key)

    async def ask_choice(self, key: Any, prompt: str, choices: Any, *, allowed_users: Any) -> Any:
        raise AssertionError("the bench agent asks no permission")

    async def close_choice(self, ref: Any, prompt: str, outcome: str) -> None:
        return None

    async def typing(self, key: Any) -> None:
        return None

    def command_menu(self, commands: Any) -> None:
        return None

    async def close(self) -> None:
        return None


# ---- the child ---------------------------------------------------------------------------------
async def _engine(args: argparse.Namespace, readings: list[dict[str, Any]]) -> dict[str, Any]:
    from bot.app import BotApp

    agents: list[ShortAgent] = []

    def make_agent() -> ShortAgent:
        agents.append(ShortAgent())
        return agents[-1]

    started = time.perf_counter()
    app: BotApp | None = None

    async def on_reading(done: int) -> None:
        assert app is not None
        client = await app.agents.client()  # the pooled agent: how many sessions it holds
        gc.collect()
        reading = {
            "conversations": done,
            "rss_mib": round(rss_mib(), 2),
            "elapsed_s": round(time.perf_counter() - started, 2),
            "runners": len(app.runners),
            "pacers": len(surface.capabilities.pacing),
            "sessions": len(client.sessions),
            "inboxes": len(client.runtime.handle._inboxes),  # a peek, for the report only
            "released": len(getattr(client, "released", ())),  # absent before releasing existed
        }
        readings.append(reading)
        _show_reading(reading, readings[0])

    surface = ChurnSurface(args, on_reading)
    async with engine_app(
        "conversation-churn-",
        surface.name,
        args.conversations,
        args.timeout,
        opener_for(make_agent),
    ) as running:
        app = running  # what on_reading reads
        await app.serve([surface], anyio.Event())
    return {
        "agents_started": len(agents),
        "prompts": sum(agent.prompts for agent in agents),
        "answered": surface.answered,
        "conversations_done": surface.done,
    }


def _show_reading(reading: dict[str, Any], first: dict[str, Any]) -> None:
    growth = reading["rss_mib"] - first["rss_mib"]
    print(
        f"  {reading['conversations']:>6} conversations: RSS {reading['rss_mib']:.1f} MiB"
        f" ({growth:+.1f}), {reading['elapsed_s']:.0f} s; live: {reading['runners']} runners,"
        f" {reading['pacers']} pacers, {reading['sessions']} session objects,"
        f" {reading['inboxes']} inboxes; {reading['released']} released sessions",
        flush=True,
    )


def child(args: argparse.Namespace) -> None:
    import bot.app  # noqa: F401  (imports first: they are not what the readings measure)

    readings: list[dict[str, Any]] = []
    result: dict[str, Any] = {}

    async def run() -> None:
        with anyio.fail_after(args.timeout):
            result.update(await _engine(args, readings))

    cpu0, wall0 = _harness.cpu_seconds(), time.perf_counter()
    try:
        anyio.run(run, backend="asyncio")
    except TimeoutError:
        result["error"] = f"did not finish within {args.timeout:g} s"
    result.update(
        readings=readings,
        wall_s=round(time.perf_counter() - wall0, 2),
        cpu_s=round(_harness.cpu_seconds() - cpu0, 2),
        peak_rss_mib=round(_harness.peak_rss_mib(), 1),
    )
    if "error" not in result and result.get("answered") != args.conversations:
        result["error"] = f"{result.get('answered')} of {args.conversations} conversations answered"
    print(CHILD_TAG + json.dumps(result), flush=True)


# ---- parent ------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--conversations", type=int, default=20_000)
    ap.add_argument("--every", type=int, default=2_000, help="conversations between readings")
    ap.add_argument("--concurrency", type=int, default=100, help="turns running at once, at most")
    ap.add_argument("--interval", type=float, default=0.2, help="surface min_edit_interval, s")
    ap.add_argument("--timeout", type=float, default=300.0, help="overall budget, seconds")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.every < 1 or args.concurrency < 1 or args.conversations < 2 * args.every:
        ap.error("--every and --concurrency must be positive, --conversations >= 2 x --every")
    if args.conversations % args.every:
        ap.error("--conversations must be a multiple of --every")
    if args.interval < 0 or args.timeout <= 0:
        ap.error("times must not be negative")

    if args.child:
        child(args)
        return 0

    print(
        f"conversation churn: {args.conversations} conversations of one short turn each,"
        f" {args.concurrency} at a time, a reading every {args.every}",
        flush=True,
    )
    cmd = ["--child", *argv]
    # The child's lines are its readings; it shares our stdout only through the capture.
    run = _harness.run_child(__file__, cmd, args.timeout + 20)
    for line in run.stdout.splitlines():
        if not line.startswith(CHILD_TAG):
            print(line, flush=True)
    result = run.result(CHILD_TAG)
    if run.timed_out:
        result = {"error": f"killed after {args.timeout + 20:.0f} s"}
    elif result is None:
        result = {"error": f"exit code {run.returncode}"}
    readings = result.get("readings") or []
    verdict: dict[str, Any] = {}
    if len(readings) >= 2:
        first, last = readings[0], readings[-1]
        growth_mb = (last["rss_mib"] - first["rss_mib"]) * 1.048576
        between = last["conversations"] - first["conversations"]
        verdict = {
            "rss_growth_mb": round(growth_mb, 2),
            "meets_target": growth_mb < TARGET_GROWTH_MB,
            "growth_bytes_per_conversation": round(growth_mb * 1e6 / between),
            "rss_first_mib": first["rss_mib"],
            "rss_last_mib": last["rss_mib"],
            "rss_last_over_first": round(last["rss_mib"] / first["rss_mib"], 3),
        }
        print(
            f"RSS growth from {first['conversations']} to {last['conversations']} conversations:"
            f" {growth_mb:.2f} MB ({verdict['growth_bytes_per_conversation']} bytes per"
            f" conversation; {'meets' if verdict['meets_target'] else 'MISSES'}"
            f" < {TARGET_GROWTH_MB:g} MB); last/first RSS {verdict['rss_last_over_first']};"
            f" wall {result.get('wall_s')} s, CPU {result.get('cpu_s')} s",
            flush=True,
        )
    if result.get("error"):
        print(f"ERROR: {result['error']}", flush=True)
    print(
        json.dumps(
            {
                "bench": "conversation_churn",
                "conversations": args.conversations,
                "every": args.every,
                "concurrency": args.concurrency,
                "interval": args.interval,
                "target_rss_growth_mb": TARGET_GROWTH_MB,
                "rss_growth_mb": verdict.get("rss_growth_mb"),
                "verdict": verdict,
                "result": result,
                "ok": "error" not in result,
            }
        )
    )
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
