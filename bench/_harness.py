"""What the benchmarks share around the measured work: a child process that runs one side and
prints its result as JSON, its RSS and CPU, and percentiles."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank q-quantile of `values` (0 < q <= 1); None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def reply_latencies(first_visible: list[float], whole: list[float]) -> dict[str, Any]:
    """The streaming benches' figures, from each reply's first chunk: to its first visible text
    (ms: p50, p99, max; None when there is none) and to the whole reply (s: p50, p99; 0 when none).
    """

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    return {
        "first_visible_ms": {
            "p50": ms(percentile(first_visible, 0.5)),
            "p99": ms(percentile(first_visible, 0.99)),
            "max": ms(max(first_visible, default=None)),
        },
        "whole_reply_s": {
            "p50": round(percentile(whole, 0.5) or 0, 2),
            "p99": round(percentile(whole, 0.99) or 0, 2),
        },
    }


# ---- a child process ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ChildRun:
    returncode: int | None  # None: still running at the timeout, so killed with its group
    stdout: str
    stderr: str  # "" unless captured

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def result(self, tag: str = "") -> dict[str, Any] | None:
        """The JSON object on the last line of stdout that is `tag` followed by "{", or None."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(tag + "{"):
                result: dict[str, Any] = json.loads(line[len(tag) :])
                return result
        return None


def kill_group(proc: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_child(
    script: str,
    argv: list[str],
    timeout: float,
    *,
    capture_stderr: bool = False,
    cwd: Path | None = None,
) -> ChildRun:
    """`python script *argv` in its own session (process group), its stdout captured (its stderr
    too if asked, else shared with ours). Past `timeout` seconds, or if we are interrupted, the
    whole group is killed: nothing outlives the command."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(script).resolve()), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if capture_stderr else None,
        start_new_session=True,
        text=True,
        cwd=cwd,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return ChildRun(None, "", "")
    except BaseException:
        kill_group(proc)
        raise
    return ChildRun(proc.returncode, out, err or "")
