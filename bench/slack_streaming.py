#!/usr/bin/env python3
"""Streaming replies into many Slack threads at once, against a Web API that enforces a per-channel
rate limit.

    python bench/slack_streaming.py [--conversations 200] [--chars 6000] [--chunk-chars 100]
                                    [--chunk-gap 0.25] [--rate-interval 1.0]
                                    [--variants streams,updates] [--timeout 300]

N people each mention the bot in their own channel at the same moment (each mention starts a
thread, so N threads run at once); the agent answers each with `--chars` characters, streamed in
chunks of `--chunk-chars` every `--chunk-gap` seconds. Everything is real but the two ends: the
Slack surface with its production pacing (`create_surface`) driving the real slack-bolt (Socket
Mode) and slack_sdk over HTTP and a websocket to the fake Slack of tests/fakes/slack_api.py, and
BotApp (access, de-duplication, ChatRunner, ReplyStream, the SQLite store). The fake runs in its own
thread and event loop, so its clock is not held up by the bot's loop, and answers 429 with
`Retry-After` to any write call (`chat.postMessage`, `chat.update`, `chat.postEphemeral`, the three
stream methods) for a channel within `--rate-interval` seconds of the previous accepted one. The
agent is the clocked in-process ACP agent of bench/_clocked.py (coroutines speaking NDJSON
JSON-RPC to the real AcpRuntime/AcpClient, plugged in through `BotApp(..., opener=...)`): one
agent, one session per conversation. Its chunks are lines of filler ending in a sequence number.

Two variants by default, each in its own child process: `streams` (Slack's native
`chat.startStream`/`appendStream`/`stopStream`) and `updates` (the fake does not know the stream
methods, so the surface falls back to `chat.postMessage` + `chat.update`).

Reported per variant: Web API calls per reply (all, and by method), 429s received (target 0), time
from the agent's first chunk to the first visible text in the thread (the first accepted
`chat.startStream` or `chat.postMessage`) p50/p99/max, time from the first chunk to the last call
of the reply (everything shown, every stream stopped), and whether every reply shows exactly what
the agent said. Each child is bounded by `--timeout` (and killed a minute after it); human lines,
then one JSON line; the exit status is 0 whatever the figures."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import anyio.abc  # noqa: E402

from bench._harness import reply_latencies  # noqa: E402
from bench._platform import (  # noqa: E402
    FakeInThread,
    bench_settings,
    child_outcome,
    run_beside,
    serving_app,
    streaming_parser,
)

if TYPE_CHECKING:
    from tests.fakes.slack_api import FakeSlack

VARIANTS = {"streams": True, "updates": False}
VISIBLE_FIRST = ("chat.startStream", "chat.postMessage")


def channel_of(conv: int) -> str:
    return f"C{conv:06d}"


def user_of(conv: int) -> str:
    return f"U{conv:06d}"


async def _run(
    args: argparse.Namespace, fake: FakeInThread[FakeSlack], streaming: bool
) -> dict[str, Any]:
    from bench._clocked import ChunkClock, InProcessAgent, Recorder, chunk_text, in_process_opener
    from surfaces.slack import create_surface
    from tests.fakes import slack_api

    conversations = range(args.conversations)
    chunks = max(1, math.ceil(args.chars / args.chunk_chars))
    expected = "".join(chunk_text(k, args.chunk_chars) for k in range(chunks)).split()
    recorder = Recorder(args.conversations, chunks, 1.0)
    clock = ChunkClock(chunks, args.chunk_gap, recorder, seed=7)
    agents: list[InProcessAgent] = []
    api = fake.api
    with tempfile.TemporaryDirectory(prefix="slack-streaming-") as tmp:
        settings = bench_settings(
            tmp,
            args.timeout,
            slack={
                "bot_token": slack_api.BOT_TOKEN,
                "app_token": slack_api.APP_TOKEN,
                "api_url": api.api_url,
                "allowed_users": [user_of(conv) for conv in conversations],
            },
        )
        surface = create_surface(settings)  # production pacing
        opener = in_process_opener(clock, args.chunk_chars, agents)
        threads: dict[int, str] = {}
        done: set[int] = set()
        started = time.perf_counter()
        async with serving_app(settings, surface, opener):
            bodies = []
            for conv in conversations:
                ts = await fake.call(api.next_ts)
                threads[conv] = ts
                text = f"<@{slack_api.BOT_USER_ID}> conversation {conv}"
                event = slack_api.mention(channel_of(conv), user_of(conv), text, ts=ts)
                bodies.append(slack_api.envelope(event))

            async def push_all() -> None:
                for body in bodies:
                    await api.push("events_api", body)

            await fake.submit(push_all())
            injected = time.perf_counter()

            def finished() -> set[int]:
                open_channels = {m.channel for m in api.streaming_now()}
                return {
                    conv
                    for conv in conversations
                    if conv not in done
                    and channel_of(conv) not in open_channels
                    and api.thread_text(channel_of(conv), threads[conv]).split() == expected
                }

            with anyio.move_on_after(args.timeout):
                while len(done) < args.conversations:
                    await anyio.sleep(0.5)
                    done.update(await fake.call(finished))
            all_done = time.perf_counter()

    calls = await fake.call(
        lambda: [(c.method, c.channel, c.at, c.status) for c in api.calls if c.channel]
    )
    by_channel: dict[str, list[tuple[str, float, int]]] = {}
    by_method: dict[str, int] = {}
    for method, channel, at, status in calls:
        by_channel.setdefault(channel, []).append((method, at, status))
        by_method[method] = by_method.get(method, 0) + 1
    first_visible, whole = [], []
    for conv in conversations:
        mine = by_channel.get(channel_of(conv), [])
        first_chunk = recorder.produced[conv][0]
        shown = [at for method, at, status in mine if method in VISIBLE_FIRST and status == 200]
        if shown and not math.isnan(first_chunk):
            first_visible.append(shown[0] - first_chunk)
        ok = [at for _, at, status in mine if status == 200]
        if ok and conv in done and not math.isnan(first_chunk):
            whole.append(ok[-1] - first_chunk)
    replies = args.conversations
    limited = sum(1 for _, _, _, status in calls if status == 429)
    return {
        "variant": "streams" if streaming else "updates",
        "conversations": replies,
        "reply_chars": chunks * args.chunk_chars,
        "chunk_chars": args.chunk_chars,
        "chunk_gap_s": args.chunk_gap,
        "rate_interval_s": args.rate_interval,
        "min_edit_interval_s": surface.capabilities.min_edit_interval,
        "replies_complete": len(done),
        "api_calls_per_reply": round(len(calls) / replies, 2),
        "calls_by_method": dict(sorted(by_method.items())),
        "http_429": limited,
        **reply_latencies(first_visible, whole),
        "streaming_s": round(chunks * args.chunk_gap, 2),
        "inject_to_all_done_s": round(all_done - injected, 2),
        "wall_s": round(all_done - started, 2),
    }


def child(args: argparse.Namespace) -> None:
    from tests.fakes.slack_api import FakeSlack

    streaming = VARIANTS[args.child]
    run_beside(
        lambda: FakeSlack(streaming=streaming, rate_interval=args.rate_interval),
        "fake-slack",
        lambda fake: _run(args, fake, streaming),
    )


def _show(result: dict[str, Any]) -> None:
    first, whole = result["first_visible_ms"], result["whole_reply_s"]
    title = {
        "streams": "native streams (chat.startStream/appendStream/stopStream)",
        "updates": "fallback (chat.postMessage + chat.update)",
    }[result["variant"]]
    print(f"{title}:")
    print(
        f"  replies complete and exact:    {result['replies_complete']}/{result['conversations']}"
    )
    print(f"  API calls per reply:           {result['api_calls_per_reply']}")
    print(f"    by method:                   {result['calls_by_method']}")
    print(f"  429s received:                 {result['http_429']} (target 0)")
    print(
        f"  first chunk -> first visible:  p50 {first['p50']} ms, p99 {first['p99']} ms, "
        f"max {first['max']} ms"
    )
    print(f"  first chunk -> reply done:     p50 {whole['p50']} s, p99 {whole['p99']} s")
    print(f"  all replies done after:        {result['inject_to_all_done_s']} s")


def _run_child(variant: str, argv: list[str], timeout: float) -> dict[str, Any]:
    outcome = child_outcome(__file__, ["--child", variant, *argv], timeout)
    if not outcome["ok"]:
        return {"ok": False, "variant": variant, "error": outcome["error"]}
    return outcome


def main(argv: list[str]) -> int:
    parser = streaming_parser(__doc__)
    parser.add_argument("--variants", default="streams,updates")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    variants = [v for v in args.variants.split(",") if v in VARIANTS]
    passed = [
        f"--conversations={args.conversations}",
        f"--chars={args.chars}",
        f"--chunk-chars={args.chunk_chars}",
        f"--chunk-gap={args.chunk_gap}",
        f"--rate-interval={args.rate_interval}",
        f"--timeout={args.timeout}",
    ]
    print(
        f"{args.conversations} channel threads at once, {args.chars} characters each "
        f"({args.chunk_chars} every {args.chunk_gap} s), fake Slack allowing one write call per "
        f"{args.rate_interval} s per channel"
    )
    results = {}
    for variant in variants:
        result = _run_child(variant, passed, args.timeout)
        results[variant] = result
        if result.get("ok"):
            _show(result)
        else:
            print(f"{variant}: the benchmark failed ({result.get('error')}); see stderr")
    print(json.dumps({"ok": all(r.get("ok") for r in results.values()), "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
