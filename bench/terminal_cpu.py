#!/usr/bin/env python3
"""What eight busy terminals cost Switchboard's own process (issue 21: "8 `yes` terminals take
83% of Switchboard's CPU").

    python bench/terminal_cpu.py [--seconds S] [--terminals N]

One process plays Switchboard: a single-threaded work loop (JSON encode/decode of a small frame,
what the bot does all day) counts how many rounds it completes in S seconds, while its event loop
also drains whatever the terminals print. Three runs, in the same process, one after another:

* baseline: no terminals;
* ours: N terminals running `yes` (printing as fast as they can) started through
  `acp.terminals.TerminalHost`, as an agent's `terminal/create` starts them: behind the
  wrapper, at a lower CPU priority and in the agent's CPU share where the cgroup file system is
  writable (the sandbox is left off, to measure the CPU rules alone);
* unshielded: the same N `yes` commands started as plain child processes whose output the same
  event loop drains (what terminals were before issue 21).

Each run spends half its time idle, measuring Switchboard's own CPU seconds per wall second
(what reading the terminals costs it: about 0 with no terminals), and half in the work loop. The
report gives both per run, and the work loop's ratios ours/baseline and unshielded/baseline
(1.0: the terminals cost Switchboard nothing). None of it is asserted; a final JSON line carries
every figure. Every terminal is killed before the next run starts, and each run is bounded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from acp.cpu_share import describe_cpu_limits  # noqa: E402
from acp.terminals import TerminalHost  # noqa: E402
from bench._harness import cpu_seconds as _cpu_seconds  # noqa: E402

FRAME = {"jsonrpc": "2.0", "method": "session/update", "params": {"text": "x" * 200}}


async def _work(seconds: float) -> tuple[float, float]:
    """Switchboard's own CPU per wall second while it does nothing else (what reading the
    terminals costs it), then the work loop's rounds per second (it yields to the event loop
    every 10 rounds, so reading competes with it)."""
    cpu, start = _cpu_seconds(), time.monotonic()
    await anyio.sleep(seconds / 2)
    idle_cpu = (_cpu_seconds() - cpu) / (time.monotonic() - start)
    rounds, start = 0, time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds / 2:
        for _ in range(10):
            json.loads(json.dumps(FRAME))
        rounds += 10
        await anyio.lowlevel.checkpoint()
    return rounds / elapsed, idle_cpu


async def _ours(count: int, seconds: float, workspace: Path) -> tuple[float, float]:
    host = TerminalHost(workspace, {"PATH": "/usr/bin:/bin"})
    async with anyio.create_task_group() as tg:
        await tg.start(host.serve)
        for n in range(count):
            await host.create(f"session-{n % 2}", {"command": "yes", "outputByteLimit": 4096})
        await anyio.sleep(0.5)  # all of them running
        result = await _work(seconds)
        host.kill_all()
        tg.cancel_scope.cancel()
    return result


async def _drain(process: anyio.abc.Process) -> None:
    assert process.stdout is not None
    async for _ in process.stdout:
        pass


async def _unshielded(count: int, seconds: float) -> tuple[float, float]:
    processes: list[anyio.abc.Process] = []
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(count):
                process = await anyio.open_process(["yes"], stdout=subprocess.PIPE)
                processes.append(process)
                tg.start_soon(_drain, process)
            await anyio.sleep(0.5)
            result = await _work(seconds)
            tg.cancel_scope.cancel()
    finally:
        for process in processes:
            process.kill()
            await process.aclose()
    return result


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--terminals", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with anyio.fail_after(args.seconds * 3 + 30):
            baseline = await _work(args.seconds)
            ours = await _ours(args.terminals, args.seconds, Path(folder))
            unshielded = await _unshielded(args.terminals, args.seconds)
    figures: dict[str, Any] = {
        "terminals": args.terminals,
        "seconds": args.seconds,
        "cpu_rules": describe_cpu_limits(),
        "rounds_per_s": {"baseline": baseline[0], "ours": ours[0], "unshielded": unshielded[0]},
        "idle_cpu_per_wall_s": {
            "baseline": baseline[1],
            "ours": ours[1],
            "unshielded": unshielded[1],
        },
        "ours_over_baseline": ours[0] / baseline[0],
        "unshielded_over_baseline": unshielded[0] / baseline[0],
    }
    print(f"terminal CPU rules here: {figures['cpu_rules']}")
    for name in ("baseline", "ours", "unshielded"):
        print(
            f"{name:>11}: {figures['rounds_per_s'][name]:>10.0f} rounds/s, "
            f"Switchboard's CPU while idle {figures['idle_cpu_per_wall_s'][name]:.2f} s per s"
        )
    print(
        f"ours/baseline {figures['ours_over_baseline']:.2f}, "
        f"unshielded/baseline {figures['unshielded_over_baseline']:.2f} (1.0: no cost)"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
