#!/usr/bin/env python3
"""How fast the ACP layer ingests streamed `agent_message_chunk` notifications from one agent.

    python bench/acp_ingest.py [--chunks N] [--reps R] [--timeout SECONDS]

The scripted fake agent (tests/fakes/fake_agent.py) is asked, by the prompt
``SCRIPT:[{"flood":N,"text":"x"}]``, to write N pre-built chunk notifications as fast as it can and
then answer ``end_turn``. Four sides read that same stream, each in its own child process (so
each peak RSS belongs to that side alone), in alternating order, R times each:

* ours: open_runtime + AcpClient.handshake + open_session, then the time from sending the prompt
  (the first step of ``session.prompt``) until its TERMINAL event, counting the chunks handed to
  ``on_text`` (the path the bot uses: a chunk with nothing queued ahead of it goes to the
  consumer straight from the frame reader);
* ours_events: the same, counting TEXT events out of the event stream (``on_text`` not given);
* raw:  subprocess.Popen + the same handshake written by hand, then the time from writing
  session/prompt until its response, in a plain ``for line in proc.stdout: json.loads(line)`` loop
  counting the chunk notifications;
* floor: the raw loop in a process that has also loaded what any anyio-on-asyncio client must
  (asyncio, which loads ssl, anyio's asyncio backend and msgspec): the least memory such a
  client can use, whatever its code.

All counts must equal N, or the run fails (so the bench cannot silently measure nothing). The
report gives best and median notifications/s per side and the ratio ours/raw (target >= 1.0: the
ACP layer keeps up with a bare parser loop), and per side the peak RSS of the whole child process
(target: ours <= 1.5x raw; `floor_rss_ratio` shows how much of that the runtime alone takes, and
`rss_over_floor` what our code adds beyond it) and how much of it the ingest itself added (the
peak minus the peak when the prompt was sent, i.e. beyond interpreter, imports, event loop and
handshake). None of the targets is asserted. A final JSON line carries every figure. Exit status:
0 when every run completed with the right count, whatever the speed; 1 otherwise. Every agent is
killed on exit and every run is bounded by --timeout overall.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._harness import kill_group, peak_rss_mib, run_child  # noqa: E402

FAKE_AGENT = ROOT / "tests" / "fakes" / "fake_agent.py"
TARGET_RATIO = 1.0
TARGET_RSS_RATIO = 1.5
CHILD_TAG = "ACP_INGEST_RESULT "


def _script(chunks: int) -> str:
    return "SCRIPT:" + json.dumps([{"flood": chunks, "text": "x"}])


def _report(result: dict[str, Any]) -> None:
    print(CHILD_TAG + json.dumps(result), flush=True)


# ---- child: ours -------------------------------------------------------------------------------
def child_ours(chunks: int, timeout: float, via_events: bool) -> None:
    import anyio

    from acp import AcpClient
    from acp.backends import get_backend
    from acp.runtime import RuntimeSpec, open_runtime
    from acp.types import EventKind

    rss_before = peak_rss_mib()

    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="acp-ingest-") as workspace:
            spec = RuntimeSpec(
                backend=get_backend("generic"),
                argv=(sys.executable, str(FAKE_AGENT)),
                workspace=Path(workspace),
            )
            with anyio.fail_after(timeout):
                async with open_runtime(spec) as runtime:
                    client = AcpClient(runtime)
                    await client.handshake()
                    session = await client.open_session()
                    text_kind, terminal_kind = EventKind.TEXT, EventKind.TERMINAL
                    count = 0
                    stats = None

                    def on_text(event: Any) -> None:
                        nonlocal count
                        count += 1

                    rss_at_prompt = peak_rss_mib()
                    started = time.perf_counter()
                    events = session.prompt(
                        _script(chunks), timeout=timeout, on_text=None if via_events else on_text
                    )
                    async for event in events:
                        kind = event.kind
                        if kind is text_kind:
                            count += 1
                        elif kind is terminal_kind:
                            stats = event.stats
                            break
                    elapsed = time.perf_counter() - started
        assert stats is not None, "no TERMINAL event"
        return {
            "count": count,
            "elapsed": elapsed,
            "stop_reason": stats.stop_reason,
            "text_chars": stats.text_chars,
            "rss_at_prompt_mib": rss_at_prompt,
        }

    result = anyio.run(run, backend="asyncio")
    side = "ours_events" if via_events else "ours"
    result.update(side=side, rss_before_mib=rss_before, peak_rss_mib=peak_rss_mib())
    _report(result)


# ---- child: raw ------------------------------------------------------------------------------
def child_floor(chunks: int, timeout: float) -> None:
    """The raw loop in a process that has loaded the runtime any anyio-on-asyncio ACP client
    needs (asyncio, which loads ssl, anyio's asyncio backend, msgspec): the memory floor."""
    import anyio._backends._asyncio  # noqa: F401
    import msgspec  # noqa: F401

    child_raw(chunks, timeout, side="floor")


def child_raw(chunks: int, timeout: float, side: str = "raw") -> None:
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"raw run exceeded {timeout:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(timeout + 0.999)))
    rss_before = peak_rss_mib()
    with tempfile.TemporaryDirectory(prefix="acp-ingest-") as workspace:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_AGENT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=workspace,
            start_new_session=True,
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            stdin, stdout = proc.stdin, proc.stdout

            def send(request_id: int, method: str, params: dict[str, Any]) -> None:
                frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                stdin.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
                stdin.flush()

            def result_of(request_id: int) -> dict[str, Any]:
                for line in stdout:
                    obj = json.loads(line)
                    if obj.get("id") == request_id and "method" not in obj:
                        if "error" in obj:
                            raise RuntimeError(f"agent error: {obj['error']}")
                        result: dict[str, Any] = obj["result"]
                        return result
                raise RuntimeError("agent stdout closed")

            send(
                0,
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {
                        "fs": {"readTextFile": False, "writeTextFile": False},
                        "terminal": False,
                    },
                    "clientInfo": {"name": "acp-ingest-raw", "version": "0"},
                },
            )
            result_of(0)
            send(1, "session/new", {"cwd": workspace, "mcpServers": []})
            session_id = result_of(1)["sessionId"]

            count = 0
            reply: dict[str, Any] | None = None
            rss_at_prompt = peak_rss_mib()
            started = time.perf_counter()
            send(
                2,
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": _script(chunks)}]},
            )
            for line in stdout:
                obj = json.loads(line)
                method = obj.get("method")
                if method == "session/update":
                    if obj["params"]["update"]["sessionUpdate"] == "agent_message_chunk":
                        count += 1
                elif method is None and obj.get("id") == 2:
                    reply = obj
                    break
            elapsed = time.perf_counter() - started
            if reply is None:
                raise RuntimeError("agent stdout closed before the prompt's response")
        finally:
            signal.alarm(0)
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            kill_group(proc)
    _report(
        {
            "side": side,
            "count": count,
            "elapsed": elapsed,
            "stop_reason": (reply.get("result") or {}).get("stopReason"),
            "rss_before_mib": rss_before,
            "rss_at_prompt_mib": rss_at_prompt,
            "peak_rss_mib": peak_rss_mib(),
        }
    )


# ---- parent ------------------------------------------------------------------------------------
def run_side(side: str, chunks: int, timeout: float) -> dict[str, Any]:
    argv = ["--child", side, "--chunks", str(chunks), "--timeout", f"{timeout:.3f}"]
    # Own process group: on timeout the child and any agent it left behind go together (ours
    # starts its agent in a new session, but that agent dies on the EOF/EPIPE of its pipes).
    run = run_child(__file__, argv, timeout + 10, capture_stderr=True)
    if run.timed_out:
        return {"side": side, "error": f"timed out after {timeout + 10:.0f} s"}
    result = run.result(CHILD_TAG)
    if result is not None:
        if result.get("count") != chunks:
            result["error"] = f"counted {result.get('count')} chunks, expected {chunks}"
        return result
    tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
    return {"side": side, "error": f"exit code {run.returncode}: {tail}"}


def summarize(runs: list[dict[str, Any]], chunks: int) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    rates = sorted(chunks / r["elapsed"] for r in ok)
    return {
        "runs": len(runs),
        "ok": len(ok),
        "rates": [round(x, 1) for x in rates],
        "best": round(max(rates), 1) if rates else None,
        "median": round(statistics.median(rates), 1) if rates else None,
        "best_seconds": round(min(r["elapsed"] for r in ok), 4) if ok else None,
        "peak_rss_mib": round(max(r["peak_rss_mib"] for r in ok), 1) if ok else None,
        "rss_before_mib": round(max(r["rss_before_mib"] for r in ok), 1) if ok else None,
        "ingest_rss_mib": (
            round(max(r["peak_rss_mib"] - r["rss_at_prompt_mib"] for r in ok), 1) if ok else None
        ),
        "errors": [r["error"] for r in runs if "error" in r],
    }


SIDES = ("ours", "ours_events", "raw", "floor")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000, help="notifications per run")
    ap.add_argument("--reps", type=int, default=3, help="runs per side, alternating")
    ap.add_argument("--timeout", type=float, default=600.0, help="overall budget, seconds")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.chunks < 1 or args.reps < 1:
        ap.error("--chunks and --reps must be positive")

    if args.child in ("ours", "ours_events"):
        child_ours(args.chunks, args.timeout, via_events=args.child == "ours_events")
        return 0
    if args.child == "raw":
        child_raw(args.chunks, args.timeout)
        return 0
    if args.child == "floor":
        child_floor(args.chunks, args.timeout)
        return 0

    deadline = time.monotonic() + args.timeout
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    print(f"acp ingest: {args.chunks} agent_message_chunk notifications, {args.reps} runs per side")
    for rep in range(args.reps):
        order = SIDES if rep % 2 == 0 else tuple(reversed(SIDES))
        for side in order:
            left = deadline - time.monotonic() - 10
            if left <= 1:
                runs[side].append({"side": side, "error": "overall timeout reached"})
                continue
            result = run_side(side, args.chunks, min(left, 300.0))
            runs[side].append(result)
            if "error" in result:
                print(f"  {side:11} run {rep + 1}: FAILED: {result['error']}", flush=True)
            else:
                rate = args.chunks / result["elapsed"]
                print(
                    f"  {side:11} run {rep + 1}: {result['elapsed']:.3f} s"
                    f"  {rate:>10,.0f} notif/s  peak RSS {result['peak_rss_mib']:.1f} MiB",
                    flush=True,
                )

    summary = {side: summarize(runs[side], args.chunks) for side in SIDES}
    for name, s in summary.items():
        if s["best"] is None:
            print(f"{name:11}: no successful run")
            continue
        print(
            f"{name:11}: best {s['best']:>10,.0f} notif/s, median {s['median']:>10,.0f} notif/s;"
            f" peak RSS {s['peak_rss_mib']:.1f} MiB (after imports {s['rss_before_mib']:.1f} MiB,"
            f" added by the ingest {s['ingest_rss_mib']:.1f} MiB)"
        )
    ours, events, raw, floor = (summary[side] for side in SIDES)
    figures: dict[str, float | None] = {
        "ratio_best": _ratio(ours["best"], raw["best"]),
        "ratio_median": _ratio(ours["median"], raw["median"]),
        "events_ratio_best": _ratio(events["best"], raw["best"]),
        "rss_ratio": _ratio(ours["peak_rss_mib"], raw["peak_rss_mib"]),
        "floor_rss_ratio": _ratio(floor["peak_rss_mib"], raw["peak_rss_mib"]),
        "rss_over_floor": _ratio(ours["peak_rss_mib"], floor["peak_rss_mib"]),
    }
    if figures["ratio_best"] is not None:
        verdict = "meets" if figures["ratio_best"] >= TARGET_RATIO else "BELOW"
        print(
            f"ratio ours/raw: best {figures['ratio_best']:.3f},"
            f" median {figures['ratio_median']:.3f} ({verdict} the {TARGET_RATIO} target);"
            f" through the event stream: best {figures['events_ratio_best']}"
        )
    if figures["rss_ratio"] is not None:
        verdict = "meets" if figures["rss_ratio"] <= TARGET_RSS_RATIO else "ABOVE"
        print(
            f"peak RSS ours/raw: {figures['rss_ratio']:.3f} ({verdict} the {TARGET_RSS_RATIO}"
            f" target); the raw loop with asyncio, anyio and msgspec merely loaded:"
            f" {figures['floor_rss_ratio']} of raw; ours over that floor:"
            f" {figures['rss_over_floor']}"
        )
    failed = any(s["errors"] for s in summary.values())
    print(
        json.dumps(
            {
                "bench": "acp_ingest",
                "chunks": args.chunks,
                "reps": args.reps,
                **summary,
                **figures,
                "target_ratio": TARGET_RATIO,
                "target_rss_ratio": TARGET_RSS_RATIO,
                "ok": not failed,
            }
        )
    )
    return 1 if failed else 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
