"""Ctrl-C pressed twice in `switchboard ask`: the real CLI and a real fake agent that ignores
cancel, stdin EOF and SIGTERM and forks a child (the worst case for stopping), with the
production shutdown graces. Ten runs, every one clean."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import STUBBORN_OPTS, FakeAgent, pid_alive, production_graces, script

HANGS = script({"ignore_cancel": True}, {"chunk": "partial answer"}, {"hang": True})
RUNS = 10


def _interrupt_twice(env: dict[str, str], agent: FakeAgent, cwd: Path) -> tuple[int, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            "ask",
            "--agent-command",
            agent.command(*STUBBORN_OPTS),
            HANGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert proc.stdout is not None
    assert proc.stdout.read(len("partial answer")) == "partial answer"  # the turn is under way
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def test_two_quick_sigints_end_ask_cleanly_every_time(cli_env, tmp_path):
    env = production_graces(cli_env)
    for run in range(RUNS):
        place = tmp_path / f"run{run}"
        (place / "agent-state").mkdir(parents=True)
        agent = FakeAgent(log_path=place / "agent-log.jsonl", state_dir=place / "agent-state")
        code, err = _interrupt_twice(env, agent, place)
        assert code == 130, (run, err)
        assert "Traceback" not in err and "RuntimeWarning" not in err, (run, err)
        assert err.strip() == "Stopped; the agent was shut down.", (run, err)
        pids = agent.pids()
        assert len(pids) == 2  # the agent and the child it forked
        assert not any(pid_alive(pid) for pid in pids), run
