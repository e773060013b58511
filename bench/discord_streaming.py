#!/usr/bin/env python3
"""Streaming replies to many Discord DMs at once, against a Discord that enforces rate limits.

    python bench/discord_streaming.py [--conversations 200] [--chars 6000] [--chunk-chars 100]
                                      [--chunk-gap 0.25] [--rate-interval 1.0] [--global-limit 50]
                                      [--timeout 300] [--min-edit-interval SECONDS]
                                      [--global-rate CALLS_PER_SECOND]

N people each DM the bot at the same moment; the agent answers each with a reply of `--chars`
characters, streamed in chunks of `--chunk-chars` every `--chunk-gap` seconds. Everything is real
but the two ends: BotApp (access, de-duplication, ChatRunner, ReplyStream and its pacing, the
SQLite store) and the Discord surface with its production pacing (`create_surface` defaults:
one message call per channel a second, 45 calls a second in all), driving the real discord.py
over a websocket and HTTP to the fake Discord of tests/fakes/discord_api.py. The fake runs in its
own thread and event loop (so its clock is not held up by the bot's loop), echoes every message
the bot posts back over the gateway as Discord does, allows one message call (create or edit) per
channel per `--rate-interval` seconds, announced with `X-RateLimit-*` headers, and
`--global-limit` calls a second in all (Discord's global limit; 0 turns it off); a call over
either limit gets a 429 with `retry_after`. The agent is an in-process ACP agent (coroutines
speaking NDJSON JSON-RPC over memory streams to the real AcpRuntime/AcpClient), plugged in
through `BotApp(..., opener=...)`: one agent, one session per conversation, as with a real agent.
`--min-edit-interval` and `--global-rate` override the surface's pacing (0: no global budget),
to see what the production values buy.

Reported: REST calls per reply (all, and by route), 429s received (target 0; by scope), time
from the agent's first chunk to the first visible text in the DM (the first message arriving at
the fake) p50/p99, and time from the first chunk to the last message call of the reply. Against
the latter, the physical floor: the calls the final messages need (one per message the replies
end with) divided by `--global-limit`, the soonest Discord would let the last of them arrive
(`floor_s`; `whole_p99_over_floor` is the whole-reply p99 over it; target 1.3 or less), and the
same at the surface's own budget, which keeps a margin below Discord's limit
(`floor_at_budget_s`, `whole_p99_over_floor_at_budget`). A reply of several messages shows its
first text before its first message's final form can exist, so keeping first text early costs it
one more call: `floor_with_first_text_s` counts that call too, the real floor for a bot that
shows first text as soon as it can (`whole_p99_over_floor_with_first_text`, and `..._at_budget`
at the surface's budget). Each reply's visible text (its messages, in order) is checked against
what the agent said. The work runs in a child process bounded by `--timeout`; human lines, then
one JSON line; exit status 0 whatever the figures."""

from __future__ import annotations

import argparse
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

from bench._agents import agent_opener, reply_text  # noqa: E402
from bench._harness import reply_latencies  # noqa: E402
from bench._platform import (  # noqa: E402
    FakeInThread,
    bench_settings,
    report_child,
    run_beside,
    serving_app,
    streaming_parser,
)

if TYPE_CHECKING:
    from tests.fakes.discord_api import FakeDiscord

MESSAGE_ROUTES = ("create_message", "edit_message")


# ---- the child: one run -------------------------------------------------------------------------
async def _run(args: argparse.Namespace, fake: FakeInThread[FakeDiscord]) -> dict[str, Any]:
    from surfaces.base import ConversationKey
    from surfaces.discord import create_surface
    from surfaces.discord.adapter import GLOBAL_RATE, DiscordSurface

    api = fake.api
    count = args.conversations
    users = await fake.call(lambda: [api.user(f"User {conv}") for conv in range(count)])
    channels = await fake.call(lambda: [api.dm_channel(user).id for user in users])
    conv_of = {channel: conv for conv, channel in enumerate(channels)}
    first_chunk: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="discord-streaming-") as tmp:
        settings = bench_settings(
            tmp,
            args.timeout,
            discord={
                "token": api.token,
                "api_url": api.api_url,
                "gateway_url": api.gateway_url,
                "allowed_users": [user.id for user in users],
            },
        )
        surface = create_surface(settings)  # production pacing, unless asked otherwise
        if args.min_edit_interval is not None or args.global_rate is not None:
            overrides: dict[str, float] = {}
            if args.min_edit_interval is not None:
                overrides["min_edit_interval"] = args.min_edit_interval
            if args.global_rate is not None:
                overrides["global_rate"] = args.global_rate
            surface = DiscordSurface(settings.discord, **overrides)
        opener = agent_opener(
            (args.chars, args.chunk_chars, args.chunk_gap),
            first_chunk,
            name="discord-bench-agent",
            first_session=1,
            clock=time.monotonic,  # the fake's clock
        )
        keys = [ConversationKey("discord", channel) for channel in channels]
        started = time.monotonic()
        all_done = False
        async with serving_app(settings, surface, opener) as app:
            with anyio.fail_after(30):
                while not surface.is_ready():
                    await anyio.sleep(0.05)

            def inject() -> None:
                for conv, user in enumerate(users):
                    api.dm(user, f"conversation {conv}")

            await fake.call(inject)
            injected = time.monotonic()
            seen: set[ConversationKey] = set()  # keys whose runner has existed
            with anyio.move_on_after(args.timeout):
                while not all_done:
                    await anyio.sleep(0.25)
                    # An idle conversation's runner is released (and gone from `runners`) a
                    # little after its turn: one that existed and is gone has finished.
                    runners = {key: app.runners.get(key) for key in keys}
                    seen.update(key for key, runner in runners.items() if runner is not None)
                    all_done = all(
                        key in seen and (runner is None or not runner.running)
                        for key, runner in runners.items()
                    )
            finished = time.monotonic()

    def collect() -> tuple[list[tuple[str, str, float, int]], dict[str, list[str]]]:
        calls = [(c.route, c.channel, c.at, c.status) for c in api.calls]
        for call in api.calls:
            if call.limited:
                limited_by[call.limited] = limited_by.get(call.limited, 0) + 1
        texts = {
            channel: [m.content for m in api.bot_messages(channel) if m.content != "…"]
            for channel in channels
        }
        return calls, texts

    limited_by: dict[str, int] = {}
    calls, texts = await fake.call(collect)
    by_route: dict[str, int] = {}
    per_channel: dict[str, list[tuple[str, float, int]]] = {channel: [] for channel in channels}
    for route, channel, at, status in calls:
        if channel in per_channel:
            per_channel[channel].append((route, at, status))
            by_route[route] = by_route.get(route, 0) + 1
    first_visible, whole = [], []
    for channel, conv in conv_of.items():
        shown = [at for route, at, status in per_channel[channel] if route in MESSAGE_ROUTES]
        ok = [
            at
            for route, at, status in per_channel[channel]
            if route in MESSAGE_ROUTES and status == 200
        ]
        if conv in first_chunk and ok:
            first_visible.append(ok[0] - first_chunk[conv])
            whole.append(max(shown) - first_chunk[conv])
    complete = sum(
        1
        for channel, conv in conv_of.items()
        if "\n".join(texts[channel]).split() == reply_text(conv, args.chars).split()
    )
    replies = len(channels)
    message_calls = sum(by_route.get(route, 0) for route in MESSAGE_ROUTES)
    limited = sum(1 for _, channel, _, status in calls if status == 429)
    latencies = reply_latencies(first_visible, whole)
    final_messages = sum(len(t) for t in texts.values())
    floor = final_messages / args.global_limit if args.global_limit > 0 else None
    budget = GLOBAL_RATE if args.global_rate is None else args.global_rate
    floor_at_budget = final_messages / budget if budget > 0 else None
    # A reply of several messages shows its first text before its first message's final form
    # can exist (that needs the text past the first split), so keeping the first text early
    # costs it one call more than its final messages: the floor with that call counted.
    early_calls = final_messages + sum(1 for t in texts.values() if len(t) > 1)
    floor_first = early_calls / args.global_limit if args.global_limit > 0 else None
    floor_first_budget = early_calls / budget if budget > 0 else None
    p99 = latencies["whole_reply_s"]["p99"]
    return {
        "conversations": replies,
        "reply_chars": args.chars,
        "chunk_chars": args.chunk_chars,
        "chunk_gap_s": args.chunk_gap,
        "rate_interval_s": args.rate_interval,
        "global_limit_per_s": args.global_limit,
        "min_edit_interval_s": surface.capabilities.min_edit_interval,
        "surface_global_rate": args.global_rate if args.global_rate is not None else "default",
        "replies_complete": complete,
        "all_turns_finished": all_done,
        "api_calls_per_reply": round(sum(by_route.values()) / replies, 2),
        "message_calls_per_reply": round(message_calls / replies, 2),
        "messages_per_reply": round(final_messages / replies, 2),
        "calls_by_route": dict(sorted(by_route.items())),
        "http_429": limited,
        "http_429_by_scope": limited_by,
        **latencies,
        "floor_s": round(floor, 2) if floor else None,
        "whole_p99_over_floor": round(p99 / floor, 2) if floor else None,
        "floor_at_budget_s": round(floor_at_budget, 2) if floor_at_budget else None,
        "whole_p99_over_floor_at_budget": (
            round(p99 / floor_at_budget, 2) if floor_at_budget else None
        ),
        "floor_with_first_text_s": round(floor_first, 2) if floor_first else None,
        "whole_p99_over_floor_with_first_text": round(p99 / floor_first, 2)
        if floor_first
        else None,
        "whole_p99_over_floor_with_first_text_at_budget": (
            round(p99 / floor_first_budget, 2) if floor_first_budget else None
        ),
        "streaming_s": round(math.ceil(args.chars / args.chunk_chars) * args.chunk_gap, 2),
        "inject_to_all_done_s": round(finished - injected, 2),
        "wall_s": round(finished - started, 2),
    }


def child(args: argparse.Namespace) -> None:
    import warnings

    warnings.simplefilter("ignore")  # a measurement, not a test: keep stdout to the figures
    from tests.fakes.discord_api import FakeDiscord

    limit = args.global_limit
    run_beside(
        lambda: FakeDiscord(
            rate_limit=(1, args.rate_interval),
            global_limit=(limit, 1.0) if limit > 0 else None,
        ),
        "fake-discord",
        lambda fake: _run(args, fake),
    )


# ---- the parent ---------------------------------------------------------------------------------
def _show(result: dict[str, Any]) -> None:
    first, whole = result["first_visible_ms"], result["whole_reply_s"]
    print(
        f"{result['conversations']} DM conversations, {result['reply_chars']} characters each "
        f"({result['chunk_chars']} every {result['chunk_gap_s']} s: "
        f"{result['streaming_s']} s of streaming), fake Discord allowing one message call per "
        f"{result['rate_interval_s']} s per channel and {result['global_limit_per_s'] or 'any'} "
        f"calls a second in all; bot pacing {result['min_edit_interval_s']} s per channel"
    )
    print(
        f"  replies complete and exact:    {result['replies_complete']}/{result['conversations']}"
    )
    print(
        f"  REST calls per reply:          {result['api_calls_per_reply']} "
        f"({result['message_calls_per_reply']} message calls, "
        f"{result['messages_per_reply']} messages) {result['calls_by_route']}"
    )
    print(
        f"  429s received:                 {result['http_429']} (target 0) "
        f"{result['http_429_by_scope']}"
    )
    print(
        f"  first chunk -> first visible:  p50 {first['p50']} ms, p99 {first['p99']} ms, "
        f"max {first['max']} ms"
    )
    print(f"  first chunk -> whole reply:    p50 {whole['p50']} s, p99 {whole['p99']} s")
    if result["floor_s"] is not None:
        print(
            f"  floor (final calls / limit):   {result['floor_s']} s; whole-reply p99 / floor "
            f"{result['whole_p99_over_floor']} (target <= 1.3)"
        )
    if result["floor_at_budget_s"] is not None:
        print(
            f"  floor at the bot's own budget: {result['floor_at_budget_s']} s; whole-reply p99 / "
            f"that floor {result['whole_p99_over_floor_at_budget']}"
        )
    if result["floor_with_first_text_s"] is not None:
        print(
            f"  floor with each reply's early first text counted: "
            f"{result['floor_with_first_text_s']} s; whole-reply p99 / that floor "
            f"{result['whole_p99_over_floor_with_first_text']} (at the bot's own budget "
            f"{result['whole_p99_over_floor_with_first_text_at_budget']})"
        )
    print(f"  all replies done after:        {result['inject_to_all_done_s']} s")


def main(argv: list[str]) -> int:
    parser = streaming_parser(__doc__)
    parser.add_argument("--global-limit", type=int, default=50, help="calls a second; 0: none")
    parser.add_argument(
        "--min-edit-interval", type=float, help="override the surface's pacing (seconds per chat)"
    )
    parser.add_argument(
        "--global-rate", type=float, help="override the surface's calls a second in all (0: none)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    return report_child(__file__, ["--child", *argv], args.timeout, _show)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
