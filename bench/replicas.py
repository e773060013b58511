#!/usr/bin/env python3
"""Replicas on one Redis against one replica on SQLite, in the same run (issue 16).

    python bench/replicas.py [--conversations 1000] [--replicas 3] [--chunk-gap 0.2]
                             [--timeout 600]
    python bench/replicas.py --conversations 20     # a smoke run, well under a minute

Each side is real `switchboard run` processes (tests/cluster_harness.py): Telegram in webhook
mode against the fake Bot API (tests/fakes/telegram_api.py), the scripted agent
(tests/fakes/fake_agent.py, one process per replica, every conversation a session of it), one
shared workspace and agent-state directory. The Redis side is `--replicas` replicas with
`SWITCHBOARD_STATE` on one `redis-server` of the bench's own; the baseline is one replica with
the SQLite store. N people each DM the bot once, all at the same moment; the updates are posted
round-robin over the replicas' webhooks (at most 64 requests in flight), as a load balancer
would. The agent answers each with two chunks `--chunk-gap` seconds apart.

Lag beyond pacing, the headline figure, per conversation: the final reply (the `sendMessage` that
shows the whole answer) arrives at the fake at `t`; the earliest moment pacing allowed it is
`max(p, t_prev + interval)`, with `p` the moment the agent answered the prompt (its own log's
clock, brought onto ours) and `t_prev` the arrival of the previous message call in that chat (a
draft), `interval` the surface's production `min_edit_interval` (1 s; it counts from when the
previous call finished, so the figure also holds that call's service time, a few ms). Excess =
`t - max(p, t_prev + interval)` (negative -> 0): queueing, dispatch, relays between replicas,
lease and store round trips. Also given: the raw lag from the update posted to the final reply.

Redis round trips per turn: `total_commands_processed` (INFO stats) counted from just before
the updates are posted to when every reply is in, divided by the turns; this includes the
replicas' heartbeats and lease renewals during the run. Per command, from INFO commandstats.

Prints human lines and one JSON line (the ratios are Redis side / SQLite side). Exit status 0
when both sides answered every conversation, whatever the figures; 1 otherwise. Each side is
bounded by `--timeout`; every process it started is stopped when it ends, also on failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import redis  # noqa: E402

from bench._harness import percentile  # noqa: E402
from tests.cluster_harness import Cluster, cluster  # noqa: E402
from tests.conftest import script  # noqa: E402
from tests.fakes.telegram_api import User  # noqa: E402

FIRST_USER = 200_000
IN_FLIGHT = 64  # webhook requests at once: a load balancer's connection pool
INTERVAL = 1.0  # the Telegram surface's production min_edit_interval (seconds per chat)
MESSAGE_CALLS = ("sendMessage", "sendMessageDraft", "editMessageText")
MARKER = re.compile(r"\bc(\d+) begins")
ENDS = re.compile(r"\bc\d+ ends")


def _prompt(conv: int, gap: float) -> str:
    return script({"chunk": f"c{conv} begins "}, {"sleep": gap}, {"chunk": f"c{conv} ends"})


def _agent_answers(c: Cluster, offset: float) -> dict[str, float]:
    """Per conversation marker: when its agent answered the prompt, on our perf_counter clock."""
    answered: dict[str, float] = {}
    for replica in c.replicas:
        asked: dict[tuple[int, Any], str] = {}
        for record in replica.agent.records():
            frame = record.get("frame") or {}
            key = (record.get("pid"), frame.get("id"))
            if record.get("dir") == "in" and frame.get("method") == "session/prompt":
                text = " ".join(b.get("text", "") for b in frame["params"].get("prompt") or [])
                asked[key] = text
            elif record.get("dir") == "out" and "stopReason" in (frame.get("result") or {}):
                text = asked.get(key, "")
                for marker in _markers(text):
                    answered[marker] = record["t"] - offset
    return answered


def _markers(text: str) -> list[str]:
    return [f"c{number}" for number in MARKER.findall(text)][:1]


async def _side(args: argparse.Namespace, root: Path, name: str, replicas: int) -> dict[str, Any]:
    people = [User(FIRST_USER + n, f"P{n}") for n in range(args.conversations)]
    env = {"SWITCHBOARD_STATE": str(root / "state.db")} if name == "sqlite" else {}
    env |= {"SWITCHBOARD_LOG_LEVEL": "warning", "SWITCHBOARD_PROMPT_TIMEOUT": "300"}
    async with cluster(
        root, "telegram", replicas=replicas, users=people, lease_ttl=10.0, env=env
    ) as c:
        client = redis.Redis.from_url(c.redis.url, decode_responses=True)
        before_stats = client.info("commandstats")
        before = int(client.info("stats")["total_commands_processed"])
        posted: dict[int, float] = {}
        limiter = anyio.Semaphore(IN_FLIGHT)

        async def post(conv: int, person: User) -> None:
            async with limiter:
                update = c.api.dm(person, _prompt(conv, args.chunk_gap))
                posted[person.id] = time.perf_counter()
                await c.post_update(update)

        started = time.perf_counter()
        with anyio.fail_after(args.timeout):
            async with anyio.create_task_group() as group:
                for conv, person in enumerate(people):
                    group.start_soon(post, conv, person)

            done: set[str] = set()
            seen = 0
            while len(done) < len(people):  # only the calls since the last look: cheap at 1,000
                await anyio.sleep(0.25)
                calls, seen = c.api.calls[seen:], len(c.api.calls)
                for call in calls:
                    if call.method == "sendMessage" and call.ok:
                        done.update(ENDS.findall(str(call.params.get("text"))))
        elapsed = time.perf_counter() - started
        after = int(client.info("stats")["total_commands_processed"])
        after_stats = client.info("commandstats")
        client.close()

        offset = time.time() - time.perf_counter()
        answers = _agent_answers(c, offset)
        excess: list[float] = []
        raw: list[float] = []
        for conv, person in enumerate(people):
            calls = [call for call in c.api.calls_to(*MESSAGE_CALLS, chat_id=person.id)]
            final = next(
                call
                for call in calls
                if call.method == "sendMessage" and f"c{conv} ends" in str(call.params.get("text"))
            )
            before_final = [call.at for call in calls if call.at < final.at]
            earliest = max(
                answers.get(f"c{conv}", final.at),
                (before_final[-1] + INTERVAL) if before_final else 0.0,
            )
            excess.append(max(0.0, final.at - earliest))
            raw.append(final.at - posted[person.id])
        turns = len(people)
        per_command = {
            command.removeprefix("cmdstat_"): int(stats["calls"])
            - int(before_stats.get(command, {}).get("calls", 0))
            for command, stats in after_stats.items()
            if command not in ("cmdstat_info",)
        }
        return {
            "side": name,
            "replicas": replicas,
            "conversations": turns,
            "served_by": len({p.replica.name for p in c.prompts()}),
            "all_done_s": round(elapsed, 2),
            "excess_ms": _dist_ms(excess),
            "raw_lag_ms": _dist_ms(raw),
            "redis_commands_per_turn": round(max(0, after - before - 1) / turns, 1),
            "redis_commands": {k: v for k, v in sorted(per_command.items()) if v > 0},
        }


def _dist_ms(values: list[float]) -> dict[str, float | None]:
    def ms(q: float) -> float | None:
        value = percentile(values, q)
        return None if value is None else round(value * 1000, 1)

    return {"p50": ms(0.5), "p99": ms(0.99), "max": ms(1.0)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _show(side: dict[str, Any]) -> None:
    ex, raw = side["excess_ms"], side["raw_lag_ms"]
    print(
        f"[{side['side']}] {side['replicas']} replica(s), {side['conversations']} conversations"
        f" (served by {side['served_by']}), all answered after {side['all_done_s']} s"
    )
    print(f"  lag beyond pacing: p50 {ex['p50']} ms, p99 {ex['p99']} ms, max {ex['max']} ms")
    print(f"  update -> final reply: p50 {raw['p50']} ms, p99 {raw['p99']} ms")
    print(f"  Redis commands per turn: {side['redis_commands_per_turn']} {side['redis_commands']}")


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"ok": True}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        for name, replicas in (("sqlite", 1), ("redis", args.replicas)):
            root = Path(tmp) / name
            root.mkdir()
            try:
                result[name] = await _side(args, root, name, replicas)
            except TimeoutError:
                result["ok"] = False
                result[name] = {"side": name, "error": f"not done after {args.timeout} s"}
    if result["ok"]:
        redis_side, sqlite_side = result["redis"], result["sqlite"]
        result["ratios"] = {
            "excess_p99": _ratio(redis_side["excess_ms"]["p99"], sqlite_side["excess_ms"]["p99"]),
            "raw_lag_p99": _ratio(
                redis_side["raw_lag_ms"]["p99"], sqlite_side["raw_lag_ms"]["p99"]
            ),
        }
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--chunk-gap", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per side")
    args = parser.parse_args(argv)
    if not 1 <= args.conversations <= 10_000 or not 1 <= args.replicas <= 10:
        parser.error("--conversations must be 1..10000 and --replicas 1..10")
    result = anyio.run(_run, args)
    for name in ("sqlite", "redis"):
        if "error" in result[name]:
            print(f"[{name}] {result[name]['error']}")
        else:
            _show(result[name])
    if result["ok"]:
        ratios = result["ratios"]
        print(
            f"redis / sqlite: lag beyond pacing p99 x{ratios['excess_p99']}, "
            f"update -> final reply p99 x{ratios['raw_lag_p99']}"
        )
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
