"""`switchboard chat` end to end against the REAL agents from npm (claude-agent-acp, codex-acp),
offline against the loopback mock model: a tool approval answered by typing its number, and a
restart that resumes the agent's own session.

`bash tests/fakes/install_agents.sh` installs the agents; CI sets SWITCHBOARD_REQUIRE_REAL_AGENTS=1
so a missing install fails instead of skipping. The console reads the approval number while the
turn runs, so the prompt and the number go on consecutive stdin lines."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import CliResult, run_chat
from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_TEXT,
    MOCK_TOOL_DONE_TEXT,
    MOCK_TOOL_MARKER,
    MOCK_TOOL_OUTPUT_FILE,
    MockModelServer,
)
from tests.fakes.real_agents import argv_or_skip as _argv_or_skip

BACKENDS = ("claude", "codex")
NOT_RESTORED = "could not be restored"


class RealChat:
    """`switchboard chat` on a real agent with a hermetic HOME, a workspace and a state file
    that persist across runs of one test."""

    def __init__(
        self, backend: str, tmp_path: Path, cli_env: dict[str, str], mock: MockModelServer
    ) -> None:
        self.backend = backend
        self.argv = _argv_or_skip(backend)
        self.tmp_path = tmp_path
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        self.workspace = tmp_path / "work"
        self.workspace.mkdir(exist_ok=True)
        if backend == "claude":
            agent_env = real_agents.claude_env_mock(home, mock.url)
        else:
            agent_env = real_agents.codex_env_mock(home, mock.url)
        ours = {k: v for k, v in cli_env.items() if k.startswith("SWITCHBOARD_")}
        self.env = {
            **{k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")},
            **ours,
            **real_agents.REAL_AGENT_BOUNDS,
        }

    def run(self, lines: Sequence[str], env: dict[str, str] | None = None) -> CliResult:
        return run_chat(
            self.backend,
            self.argv,
            self.workspace,
            tuple(lines),
            env={**self.env, **(env or {})},
            cwd=self.tmp_path,
            timeout=120,
        )


@pytest.fixture
def real_chat(tmp_path, cli_env, mock_model):  # type: ignore[no-untyped-def]
    def make(backend: str) -> RealChat:
        return RealChat(backend, tmp_path, cli_env, mock_model)

    return make


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tool_approved_by_typing_1_really_runs_and_the_turn_finishes(backend, real_chat):
    chat = real_chat(backend)
    result = chat.run(["SCN_TOOL run it", "1"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "The agent wants to use a tool:" in out
    assert "echo switchboard-tool-ran > tool_ran.txt (execute)" in out
    assert "  1) " in out and "  3) " in out and "Type a number to answer." in out
    assert "Answered: Yes" in out
    assert out.index("Answered:") < out.index(MOCK_TOOL_DONE_TEXT)
    marker = chat.workspace / MOCK_TOOL_OUTPUT_FILE
    assert marker.exists()
    assert marker.read_text().strip() == MOCK_TOOL_MARKER
    assert "Traceback" not in result.stderr


def test_a_claude_tool_rejected_by_typing_3_does_not_run(real_chat):
    chat = real_chat("claude")
    result = chat.run(["SCN_TOOL run it", "3", "/status"])
    assert result.returncode == 0, result.stderr
    assert "Answered: No" in result.stdout
    assert not (chat.workspace / MOCK_TOOL_OUTPUT_FILE).exists()
    assert "Turn: idle" in result.stdout


def test_a_claude_tool_still_waiting_at_end_of_input_is_rejected_and_does_not_run(real_chat):
    chat = real_chat("claude")
    result = chat.run(["SCN_TOOL run it"])  # nobody is left to answer: rejected at once
    assert result.returncode == 0, result.stderr
    assert "Type a number to answer.\nAnswered: No\n" in result.stdout
    assert not (chat.workspace / MOCK_TOOL_OUTPUT_FILE).exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restart_resumes_the_real_agents_session(backend, real_chat, mock_model):
    chat = real_chat(backend)
    remembered = f"zebra-{uuid.uuid4().hex[:8]}"
    first = chat.run([f"SCN_TEXT remember {remembered}"])
    assert first.returncode == 0, first.stderr
    assert MOCK_TEXT in first.stdout
    follow_up = f"SCN_TEXT again {uuid.uuid4().hex[:8]}"
    second = chat.run([follow_up])
    assert second.returncode == 0, second.stderr
    assert NOT_RESTORED not in second.stdout
    assert second.stdout.count(MOCK_TEXT) == 1  # the first turn is not shown again
    assert remembered not in second.stdout
    bodies = [json.dumps(r.body) for r in mock_model.requests if r.body is not None]
    resumed = [body for body in bodies if follow_up in body]
    assert resumed, "the follow-up never reached the model"
    assert any(remembered in body for body in resumed)  # the model saw the earlier turn
