"""Contract tests against the REAL agents from npm (claude-agent-acp 0.101.0 on node 22,
codex-acp 2.6.0), offline: without credentials, and against the loopback mock model API.

`bash tests/fakes/install_agents.sh` installs them; CI sets SWITCHBOARD_REQUIRE_REAL_AGENTS=1 so a
missing install fails instead of skipping."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

import pytest

from tests.fakes import real_agents
from tests.fakes.mock_model import MOCK_TEXT, MOCK_TOOL_OUTPUT_FILE, MockModelServer
from tests.fakes.real_agents import argv_or_skip as _argv_or_skip

BACKENDS = ("claude", "codex")


def _counted_command(argv: list[str], spawn_log: Path) -> str:
    """The agent's command line behind a shell that records each spawn."""
    return shlex.join(["/bin/sh", "-c", 'echo spawn >> "$0"; exec "$@"', str(spawn_log), *argv])


def _spawns(spawn_log: Path) -> int:
    return len(spawn_log.read_text().splitlines()) if spawn_log.exists() else 0


def _agent_env(backend: str, home: Path, mock: MockModelServer | None) -> dict[str, str]:
    if backend == "claude":
        if mock is None:
            return real_agents.claude_env_no_credentials(home)
        return real_agents.claude_env_mock(home, mock.url)
    if mock is None:
        return real_agents.codex_env_no_credentials(home)
    return real_agents.codex_env_mock(home, mock.url)


def _ask(run_cli, backend, tmp_path, text, mock=None, timeout="60", options=()):  # type: ignore[no-untyped-def]
    argv = _argv_or_skip(backend)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    spawn_log = tmp_path / "spawns.log"
    env = _agent_env(backend, home, mock)
    env = {k: v for k, v in env.items() if not k.startswith("SWITCHBOARD_")}
    # A real agent's cold start (node, its native binary) can outlast the tests' fast 10 s
    # initialize timeout on a loaded machine, and a retry is a second spawn: these tests count
    # spawns, so the agent gets the production default's room to start.
    env["SWITCHBOARD_INITIALIZE_TIMEOUT"] = "90"
    result = run_cli(
        "ask",
        "--agent",
        backend,
        "--agent-command",
        _counted_command(argv, spawn_log),
        "--cwd",
        str(workspace),
        "--timeout",
        timeout,
        *options,
        text,
        env=env,
        timeout=120,
    )
    return result, _spawns(spawn_log), workspace


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_credentials_the_agent_asks_for_sign_in_after_one_spawn(backend, run_cli, tmp_path):
    result, spawns, _ = _ask(run_cli, backend, tmp_path, "hello")
    assert result.returncode == 1
    assert spawns == 1
    sign_in = {"claude": "claude /login", "codex": "codex login"}[backend]
    assert sign_in in result.stderr
    assert "not signed in" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_turn_streams_the_models_text(backend, run_cli, tmp_path, mock_model):
    result, spawns, _ = _ask(run_cli, backend, tmp_path, "SCN_TEXT say hello", mock_model)
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
    assert spawns == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rate_limited_turn_is_retried_and_then_answers(backend, run_cli, tmp_path, mock_model):
    mock_model.reset_counters()
    before = mock_model.count(scenario="SCN_E429_ONCE", status=429)
    result, spawns, _ = _ask(run_cli, backend, tmp_path, "SCN_E429_ONCE hello", mock_model)
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
    assert mock_model.count(scenario="SCN_E429_ONCE", status=429) == before + 1
    assert "429" not in result.stdout  # the error echo is not shown as the answer
    assert spawns == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_persistent_rate_limit_ends_in_one_throttling_sentence(
    backend, run_cli, tmp_path, mock_model
):
    result, _, _ = _ask(run_cli, backend, tmp_path, "SCN_E429 hello", mock_model)
    assert result.returncode == 1
    assert "throttling" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_claude_refusal_ends_as_a_refusal_card(run_cli, tmp_path, mock_model):
    result, _, _ = _ask(run_cli, "claude", tmp_path, "SCN_REFUSAL tell me", mock_model)
    assert result.returncode == 1
    assert "declined" in result.stderr
    assert "rephrasing" in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tool_call_is_reported_as_needing_approval_and_never_runs(
    backend, run_cli, tmp_path, mock_model
):
    result, _, workspace = _ask(run_cli, backend, tmp_path, "SCN_TOOL run it", mock_model)
    assert result.returncode == 1
    assert "approval" in result.stderr
    assert "echo" in result.stderr  # the tool is named by its command
    assert not (workspace / MOCK_TOOL_OUTPUT_FILE).exists()


# A real 1x1 PNG: the agent may check what it forwards.
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000000030101001807a52c0000000049454e44ae426082"
)


def test_an_image_reaches_the_claude_model_request(run_cli, tmp_path, mock_model):
    """claude-agent-acp advertises promptCapabilities.image: `ask --file` sends an image block,
    which the agent forwards to the model as an Anthropic image content block."""
    picture = tmp_path / "pixel.png"
    picture.write_bytes(PIXEL_PNG)
    result, _, workspace = _ask(
        run_cli,
        "claude",
        tmp_path,
        "SCN_TEXT what is in this picture?",
        mock_model,
        options=("--file", str(picture)),
    )
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
    images = [
        block
        for request in mock_model.requests
        if request.endpoint == "messages" and isinstance(request.body, dict)
        for message in request.body.get("messages") or ()
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]
    assert images, "no model request carried the image"
    source = images[0]["source"]
    assert source["media_type"] == "image/png"
    assert base64.b64decode(source["data"]) == PIXEL_PNG
    assert not (workspace / ".switchboard").exists()  # sent as an image, not saved
