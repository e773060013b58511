"""Issue 21: the real npm agents (claude-agent-acp, codex-acp) answer from inside the bubblewrap
sandbox, against the loopback mock model: their node and packages under a home the sandbox
shows read-only (the outermost `node_modules`), their own config in the agent home, their key
passed by the preset's allowlist, and nothing of Switchboard's in their environment."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import real_agents
from tests.fakes.mock_model import MOCK_TEXT
from tests.fakes.real_agents import argv_or_skip

TOKEN = "123456:AAsecret-telegram-token"


@pytest.mark.parametrize("backend", ["claude", "codex"])
def test_a_real_agent_answers_from_inside_the_sandbox(  # type: ignore[no-untyped-def]
    backend, cli_env, tmp_path, mock_model
) -> None:
    argv = argv_or_skip(backend)
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "work"
    workspace.mkdir()
    if backend == "claude":
        agent_env = real_agents.claude_env_mock(home, mock_model.url)
    else:
        agent_env = real_agents.codex_env_mock(home, mock_model.url)
    env = {k: v for k, v in cli_env.items() if k != "SWITCHBOARD_AGENT_SANDBOX"}
    env |= {k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")}
    env |= {
        "SWITCHBOARD_AGENT_SANDBOX": "bwrap",
        # the hermetic home holds the agent's config (CLAUDE_CONFIG_DIR, CODEX_HOME): it is
        # the agent home, the one directory besides the workspace the agent may write
        "SWITCHBOARD_AGENT_HOME": str(home),
        "SWITCHBOARD_AGENT_ENV": "IS_SANDBOX,NO_BROWSER,DISABLE_AUTOUPDATER",
        "SWITCHBOARD_INITIALIZE_TIMEOUT": "90",
        "SWITCHBOARD_TELEGRAM__TOKEN": TOKEN,
        "SWITCHBOARD_LOG_LEVEL": "info",
    }
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bot", "ask", "--agent", backend),
            *("--agent-command", shlex.join(argv), "--cwd", str(workspace), "--timeout", "60"),
            "SCN_TEXT say hello",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
    assert "in its sandbox" in result.stderr  # the start was logged as sandboxed
    assert TOKEN not in result.stdout and TOKEN not in result.stderr
    assert Path(home).stat().st_mode & 0o777 == 0o700
