#!/usr/bin/env python3
"""Streaming replies to many Telegram DMs at once, against a Bot API that enforces flood limits.

    python bench/telegram_streaming.py [--conversations 200] [--chars 6000] [--chunk-chars 100]
                                       [--chunk-gap 0.25] [--rate-interval 1.0] [--timeout 300]
                                       [--progress]

N people each DM the bot at the same moment; the agent answers each with a reply of `--chars`
characters, streamed in chunks of `--chunk-chars` every `--chunk-gap` seconds. Everything real
but the two ends: BotApp (access, de-duplication, ChatRunner, ReplyStream and its pacing, the
SQLite store) and the Telegram surface with its production pacing (`create_surface` defaults),
driving the real python-telegram-bot over HTTP to the fake Bot API of tests/fakes/telegram_api.py.
The fake runs in its own thread and event loop (so its clock is not held up by the bot's loop)
and answers 429 with `retry_after` to any second message-producing call (sendMessage,
sendMessageDraft, editMessageText, editMessageReplyMarkup) in one chat within `--rate-interval`
seconds of the previous accepted one. Chat actions (typing) are not messages and are not
limited. The agent is an in-process ACP agent (coroutines speaking NDJSON JSON-RPC over memory
streams to the real AcpRuntime/AcpClient), plugged in through `BotApp(..., opener=...)`: one
agent, one session per conversation, as with a real agent.

Reported: API calls per reply (all, and by method), 429s received (target 0), time from the
agent's first chunk to the first visible text in the chat (a draft or message arriving at the
fake) p50/p99, and time from the first chunk to the whole reply delivered. Each reply's visible
text is checked against what the agent said. The work runs in a child process bounded by
`--timeout`; human lines, then one JSON line; exit status 0 whatever the figures.

`--progress` runs the same bench twice in one run, today's replies and then replies with progress
(a plan, re-sent as its steps are done, and 10 tool calls per turn, shown in the live reply's
status block), and prints both side by side: the target is the same order of calls per reply and
0 429s; the final text of a progress reply also carries its tools summary line."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
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
    child_outcome,
    report_child,
    run_beside,
    serving_app,
    streaming_parser,
)

if TYPE_CHECKING:
    from tests.fakes.telegram_api import FakeBotApi

FIRST_USER = 100_000
MESSAGE_METHODS = ("sendMessageDraft", "sendMessage", "editMessageText")
AGENT_PIPE_ITEMS = 10_000  # writes the agent's pipes buffer before the writer waits
PROGRESS_TOOLS = 10  # tool calls per turn in the --progress variant


def _ends(text: str, marker: str, ending: list[str]) -> bool:
    """Whether a chat shows the whole reply: its marker, then the tools line if one is due."""
    words = text.split()
    tail = words[len(words) - len(ending) :] if ending else []
    body = words[: len(words) - len(ending)] if ending else words
    return bool(body) and body[-1] == marker and tail == ending


# ---- the child: one run ------------------------------------------------------------------------
async def _run(args: argparse.Namespace, fake: FakeInThread[FakeBotApi]) -> dict[str, Any]:
    from surfaces.telegram import create_surface
    from tests.fakes.telegram_api import User

    users = [FIRST_USER + conv for conv in range(args.conversations)]
    first_chunk: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="telegram-streaming-") as tmp:
        settings = bench_settings(
            tmp,
            args.timeout,
            telegram={
                "token": fake.api.token,
                "api_url": fake.api.url,
                "allowed_users": [str(user) for user in users],
            },
        )
        surface = create_surface(settings)  # production pacing, unless asked otherwise
        if args.min_edit_interval is not None:
            surface.capabilities = replace(
                surface.capabilities, min_edit_interval=args.min_edit_interval
            )
        agent = (args.chars, args.chunk_chars, args.chunk_gap)
        tools = PROGRESS_TOOLS if args.with_tools else 0
        opener = agent_opener(agent, first_chunk, pipe_items=AGENT_PIPE_ITEMS, tools=tools)
        ending = [] if not tools else f"Tools: {tools} reads".split()
        expected = {
            user: reply_text(conv, args.chars).split() + ending for conv, user in enumerate(users)
        }
        done: set[int] = set()
        started = time.perf_counter()
        async with serving_app(settings, surface, opener):

            def inject() -> None:
                for conv, user in enumerate(users):
                    fake.api.dm(User(user, f"User {conv}"), f"conversation {conv}")

            await fake.call(inject)
            injected = time.perf_counter()
            with anyio.move_on_after(args.timeout):
                while len(done) < len(users):
                    await anyio.sleep(0.5)
                    texts = await fake.call(
                        lambda: {
                            user: fake.api.chat_text(user) for user in users if user not in done
                        }
                    )
                    done.update(
                        user
                        for user, text in texts.items()
                        if _ends(text, f"END-{user - FIRST_USER}.", ending)
                    )
            finished = time.perf_counter()

    calls = await fake.call(lambda: [(c.method, c.chat_id, c.at, c.status) for c in fake.api.calls])
    texts = await fake.call(lambda: {user: fake.api.chat_text(user) for user in users})
    per_chat: dict[int, list[tuple[str, float, int]]] = {user: [] for user in users}
    for method, chat, at, status in calls:
        if chat in per_chat:
            per_chat[chat].append((method, at, status))
    first_visible, whole = [], []
    by_method: dict[str, int] = {}
    for conv, user in enumerate(users):
        chat_calls = per_chat[user]
        for method, _, _ in chat_calls:
            by_method[method] = by_method.get(method, 0) + 1
        shown = [
            at for method, at, status in chat_calls if method in MESSAGE_METHODS and status == 200
        ]
        finals = [
            at for method, at, status in chat_calls if method == "sendMessage" and status == 200
        ]
        if conv in first_chunk and shown:
            first_visible.append(shown[0] - first_chunk[conv])
        if conv in first_chunk and finals and user in done:
            whole.append(finals[-1] - first_chunk[conv])
    complete = sum(1 for user in users if texts[user].split() == expected[user])
    replies = len(users)
    message_calls = sum(by_method.get(method, 0) for method in MESSAGE_METHODS)
    limited = sum(1 for _, chat, _, status in calls if status == 429 and chat in per_chat)
    return {
        "variant": "progress" if tools else "plain",
        "conversations": replies,
        "reply_chars": args.chars,
        "chunk_chars": args.chunk_chars,
        "chunk_gap_s": args.chunk_gap,
        "rate_interval_s": args.rate_interval,
        "min_edit_interval_s": surface.capabilities.min_edit_interval,
        "replies_complete": complete,
        "api_calls_per_reply": round(sum(by_method.values()) / replies, 2),
        "message_calls_per_reply": round(message_calls / replies, 2),
        "calls_by_method": dict(sorted(by_method.items())),
        "http_429": limited,
        **reply_latencies(first_visible, whole),
        "streaming_s": round(math.ceil(args.chars / args.chunk_chars) * args.chunk_gap, 2),
        "inject_to_all_done_s": round(finished - injected, 2),
        "wall_s": round(finished - started, 2),
    }


def child(args: argparse.Namespace) -> None:
    from tests.fakes.telegram_api import FakeBotApi

    run_beside(
        lambda: FakeBotApi(rate_interval=args.rate_interval),
        "fake-bot-api",
        lambda fake: _run(args, fake),
    )


# ---- the parent ----------------------------------------------------------------------------------
def _show(result: dict[str, Any]) -> None:
    first, whole = result["first_visible_ms"], result["whole_reply_s"]
    print(
        f"{result['conversations']} DM conversations, {result['reply_chars']} characters each "
        f"({result['chunk_chars']} every {result['chunk_gap_s']} s: "
        f"{result['streaming_s']} s of streaming), fake Bot API allowing one message call per "
        f"{result['rate_interval_s']} s per chat"
    )
    print(
        f"  replies complete and exact:    {result['replies_complete']}/{result['conversations']}"
    )
    print(
        f"  API calls per reply:           {result['api_calls_per_reply']} "
        f"({result['message_calls_per_reply']} message calls) {result['calls_by_method']}"
    )
    print(f"  429s received:                 {result['http_429']} (target 0)")
    print(
        f"  first chunk -> first visible:  p50 {first['p50']} ms, p99 {first['p99']} ms, "
        f"max {first['max']} ms"
    )
    print(f"  first chunk -> whole reply:    p50 {whole['p50']} s, p99 {whole['p99']} s")
    print(f"  all replies done after:        {result['inject_to_all_done_s']} s")


def _show_both(result: dict[str, Any]) -> None:
    plain, progress = result["plain"], result["progress"]
    for variant in (plain, progress):
        if variant.get("ok"):
            print(f"[{variant['variant']}]")
            _show(variant)
    if plain.get("ok") and progress.get("ok"):
        print(
            "  progress vs plain: calls per reply "
            f"{progress['api_calls_per_reply']} vs {plain['api_calls_per_reply']}, "
            f"429s {progress['http_429']} vs {plain['http_429']} (target: same order, 0)"
        )


def main(argv: list[str]) -> int:
    parser = streaming_parser(__doc__)
    parser.add_argument(
        "--min-edit-interval", type=float, help="override the surface's pacing (seconds per chat)"
    )
    parser.add_argument(
        "--progress", action="store_true", help="also run replies with a plan and 10 tool calls"
    )
    parser.add_argument("--with-tools", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if not args.progress:
        return report_child(__file__, ["--child", *argv], args.timeout, _show)
    rest = [arg for arg in argv if arg != "--progress"]
    both = {
        "plain": child_outcome(__file__, ["--child", *rest], args.timeout),
        "progress": child_outcome(__file__, ["--child", "--with-tools", *rest], args.timeout),
    }
    _show_both(both)
    print(json.dumps(both))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
