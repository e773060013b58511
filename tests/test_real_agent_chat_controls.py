"""`switchboard chat` on the REAL claude-agent-acp, offline against the loopback mock model: the
agent's AskUserQuestion answered by typing the option's number, and an `allow_always` answer
remembered so that the next identical command runs without a card. (A steered turn:
tests/test_real_agent_chat_steer.py, and through Telegram tests/test_real_agent_telegram_controls.py.)

What claude-agent-acp does on the wire is pinned by tests/test_real_agent_steer_ask.py; this
file checks the same through Switchboard. `bash tests/fakes/install_agents.sh` installs the
agent; without it these tests fail with that hint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_chat
from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_ASK_ANSWERED,
    MOCK_ASK_OPTIONS,
    MOCK_ASK_QUESTION,
    MOCK_TOOL_COMMAND,
    MOCK_TOOL_DONE_TEXT,
    MockModelServer,
)

CARD = "The agent wants to use a tool:"
REFUSED = "User refused permission"
BOUND = 120.0  # one chat run on a real node agent on a loaded 2-core machine, never measured


def claude_argv() -> list[str]:
    argv = real_agents.claude_acp_argv()
    if argv is None:
        pytest.fail("claude-agent-acp is not installed; run: bash tests/fakes/install_agents.sh")
    return argv


@pytest.fixture
def mock_model() -> Any:
    """A mock per test (conftest's is per module): each test counts only its own requests."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
def chat_env(tmp_path: Path, cli_env: dict[str, str], mock_model: MockModelServer) -> dict:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "work").mkdir()
    agent_env = real_agents.claude_env_mock(home, mock_model.url)
    return {
        **{k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")},
        **{k: v for k, v in cli_env.items() if k.startswith("SWITCHBOARD_")},
        **real_agents.REAL_AGENT_BOUNDS,
        "SWITCHBOARD_LOG_LEVEL": "debug",  # traces the frames Switchboard sends
    }


def sent_frames(stderr: str) -> list[dict[str, Any]]:
    """The JSON-RPC frames Switchboard sent the agent, from the debug trace (`-> method#id {..}`)."""
    frames = []
    for line in stderr.splitlines():
        try:
            message = json.loads(line).get("msg", "")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(message, str) and message.startswith("-> ") and " {" in message:
            try:
                frames.append(json.loads(message[message.index(" {") + 1 :]))
            except json.JSONDecodeError:
                continue  # a long frame traced cut short
    return frames


def prompts(frames: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for frame in frames
        if frame.get("method") == "session/prompt"
        for block in frame["params"]["prompt"]
        if block.get("type") == "text"
    ]


def permission_answers(frames: list[dict[str, Any]]) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in frames
        if "method" not in frame and "outcome" in (frame.get("result") or {})
    ]


def ask_in_chat(tmp_path: Path, env: dict[str, str], *lines: str) -> Any:
    return run_chat(
        "claude",
        claude_argv(),
        tmp_path / "work",
        ["SCN_ASK choose a colour", *lines],
        env=env,
        cwd=tmp_path,
        timeout=BOUND,
    )


def model_read(mock: MockModelServer) -> str:
    """The tool result the model got for its AskUserQuestion."""
    answered = [r for r in mock.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert answered, "the answer never reached the model"
    return answered[0].tool_results[-1]


def test_the_agents_question_is_answered_by_typing_the_options_number(
    tmp_path, chat_env, mock_model
):
    # claude's form: the choice and an optional "Other" text, one menu with "Other…" in it
    result = ask_in_chat(tmp_path, chat_env, str(MOCK_ASK_OPTIONS.index("Blue") + 1))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert MOCK_ASK_QUESTION in out
    for number, label in enumerate(MOCK_ASK_OPTIONS, 1):
        assert f"  {number}) {label}\n" in out
    assert f'"{MOCK_ASK_QUESTION}"="Blue"' in model_read(mock_model)
    assert MOCK_ASK_ANSWERED in out and '="Blue"' in out.split(MOCK_ASK_ANSWERED, 1)[1]
    frames = sent_frames(result.stderr)
    assert prompts(frames) == ["SCN_ASK choose a colour"]  # the answer was not a prompt
    answers = [f["result"] for f in frames if "method" not in f and "action" in f.get("result", {})]
    assert answers == [{"action": "accept", "content": {"question_0": "Blue"}}]


def test_other_then_a_typed_answer_reaches_the_model(tmp_path, chat_env, mock_model):
    typed = "Green with white stripes"
    other = str(len(MOCK_ASK_OPTIONS) + 1)  # "Other…" right after the options
    result = ask_in_chat(tmp_path, chat_env, other, typed)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"  {other}) Other…\n" in result.stdout
    assert f'"{MOCK_ASK_QUESTION}"="{typed}"' in model_read(mock_model)
    frames = sent_frames(result.stderr)
    assert prompts(frames) == ["SCN_ASK choose a colour"]
    answers = [f["result"] for f in frames if "method" not in f and "action" in f.get("result", {})]
    assert answers == [{"action": "accept", "content": {"question_0_custom": typed}}]


def test_allow_always_is_remembered_for_the_next_identical_command(tmp_path, chat_env, mock_model):
    # claude-agent-acp asks again for this very command (tests/test_real_agent_steer_ask.py):
    # only Switchboard remembering the answer spares the second card.
    result = run_chat(
        "claude",
        claude_argv(),
        tmp_path / "work",
        ["SCN_TOOL run it", "2", "SCN_TOOL run it again"],
        env=chat_env,
        cwd=tmp_path,
        timeout=BOUND,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.count(CARD) == 1, out
    assert f"{MOCK_TOOL_COMMAND} (execute)" in out
    assert "  2) Yes, and " in out  # the agent's allow_always option, typed
    assert "Answered: No" not in out
    assert out.count(MOCK_TOOL_DONE_TEXT) == 2
    frames = sent_frames(result.stderr)
    assert permission_answers(frames) == ["allow-with-updates", "allow-with-updates"]
    assert prompts(frames) == ["SCN_TOOL run it", "SCN_TOOL run it again"]
    last = mock_model.filtered(scenario="SCN_TOOL")[-1]
    assert len(last.tool_results) == 2  # both commands ran and told the model
    assert not any(REFUSED in text for text in last.tool_results)
