"""`switchboard chat` on the REAL claude-agent-acp, offline against the loopback mock model: a
turn steered with `/steer TEXT` typed while the reply streams (stdin piped, written line by line)
reaches the model in that same turn, and the steer is never sent as a prompt of its own.

This needs the console to pass a line that acts on the running reply (`/steer`) to the bot at
once, even with piped stdin (branch i24-console-busy); before that the console holds the line
until the reply ends. `bash tests/fakes/install_agents.sh` installs the agent; without it this
test fails with that hint."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import pytest

from tests.conftest import CliResult
from tests.fakes.mock_model import MOCK_STEER_SEEN, MockModelServer
from tests.test_real_agent_chat_controls import (  # noqa: F401  (fixtures)
    BOUND,
    chat_env,
    claude_argv,
    mock_model,
    prompts,
    sent_frames,
)

STEER_TEXT = "No, use the other file instead"


class LiveChat:
    """`switchboard chat` whose stdin is written line by line while it runs, so a line can wait
    for something to happen first (the turn to be streaming). Output goes to files: the debug
    trace on stderr would fill a pipe nobody reads."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.out_path, self.err_path = tmp_path / "chat.stdout", tmp_path / "chat.stderr"
        self.out: TextIO = self.out_path.open("w")
        self.err: TextIO = self.err_path.open("w")
        argv = [sys.executable, "-m", "bot", "chat", "--agent", "claude"]
        argv += ["--agent-command", shlex.join(claude_argv())]
        argv += ["--cwd", str(tmp_path / "work"), "--timeout", "60"]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=self.out, stderr=self.err, text=True, env=env,
            cwd=tmp_path,
        )  # fmt: skip

    def line(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self) -> CliResult:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=BOUND)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.out.close()
            self.err.close()
        return CliResult(self.proc.returncode, self.out_path.read_text(), self.err_path.read_text())


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_a_turn_steered_with_slash_steer_reaches_the_model_in_the_same_turn(
    tmp_path: Path,
    chat_env: dict[str, str],  # noqa: F811
    mock_model: MockModelServer,  # noqa: F811
) -> None:
    chat = LiveChat(tmp_path, chat_env)
    try:
        chat.line("SCN_STEER write the report")

        def streaming() -> bool:  # the model is mid-reply: a steer now lands in this turn
            return any(r.response == "slow" for r in mock_model.filtered(scenario="SCN_STEER"))

        wait_until(streaming, "the slow reply to start")
        chat.line(f"/steer {STEER_TEXT}")

        def settled() -> bool:  # the steer answered, or the slow reply ran to its end untouched
            slow = [r for r in mock_model.filtered(scenario="SCN_STEER") if r.response == "slow"]
            steered = MOCK_STEER_SEEN in chat.out_path.read_text()
            return steered or any(r.done and not r.disconnected for r in slow)

        # stdin stays open meanwhile: the end of input is no part of what is tested
        wait_until(settled, "the steer's reply or the end of the slow one")
    finally:
        result = chat.finish()
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{MOCK_STEER_SEEN} {STEER_TEXT}" in result.stdout
    seen = [r for r in mock_model.filtered(scenario="SCN_STEER") if r.response == "steer_seen"]
    assert seen and seen[0].injected_texts == [STEER_TEXT]
    frames = sent_frames(result.stderr)
    assert prompts(frames) == ["SCN_STEER write the report"]  # the steer was never a prompt
    steers = [f for f in frames if f.get("method") == "_session/steering"]
    assert [s["params"]["prompt"] for s in steers] == [[{"type": "text", "text": STEER_TEXT}]]
