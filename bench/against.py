#!/usr/bin/env python3
"""One benchmark run on two commits in the same sitting, so a change is judged against what it
replaced on the same machine under the same load.

    python bench/against.py REF bench/engine_concurrency.py [bench arguments ...]
                           [--rounds 1] [--order old-first|new-first|alternate]

REF (a commit, branch or tag) is checked out into a temporary detached worktree; the benchmark
script named is run from that tree and from this one, one after the other (with `--rounds N`, N
times each, alternating which side goes first unless `--order` says otherwise), each with its
own tree first on PYTHONPATH, and each run's output is printed under a heading naming its
commit. The benchmark itself prints its ratios against its own baseline; comparing those two
outputs is the measure. The temporary worktree is removed at the end, whatever happens."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _run(tree: Path, label: str, script: str, args: list[str]) -> int:
    print(f"\n===== {label} =====", flush=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, str(tree / script), *args], cwd=tree, env=env)
    return done.returncode


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("ref", help="the commit to compare against (e.g. main~3, a hash)")
    ap.add_argument("script", help="the benchmark, relative to the repository (bench/x.py)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--order", choices=["old-first", "new-first", "alternate"], default="alternate")
    args, rest = ap.parse_known_args(argv)
    if not (ROOT / args.script).is_file():
        ap.error(f"no benchmark at {args.script} in this tree")
    old = _git("rev-parse", "--short", args.ref)
    new = _git("rev-parse", "--short", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no")
    dirty = " + uncommitted changes" if changed else ""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="switchboard-against-") as scratch:
        tree = Path(scratch) / "old"
        _git("worktree", "add", "--detach", "--quiet", str(tree), old)
        try:
            if not (tree / args.script).is_file():
                ap.error(f"{args.script} does not exist at {old}")
            sides = [(tree, f"{old} ({args.ref})"), (ROOT, f"{new} (HEAD{dirty})")]
            for round_ in range(args.rounds):
                swap = args.order == "new-first" or (args.order == "alternate" and round_ % 2)
                for where, label in reversed(sides) if swap else sides:
                    failed |= _run(where, label, args.script, rest) != 0
        finally:
            _git("worktree", "remove", "--force", str(tree))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
