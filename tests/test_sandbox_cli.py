"""Issue 21 through the real CLI: `doctor` and `/status` say how agents are isolated, `auto`
falls back (saying so once) where bubblewrap is missing, `bwrap` refuses to start without it,
the agent's user is checked, and Switchboard's own environment is unreadable to the agent."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAKE_AGENT, FakeAgent, script

TOKEN = "123456:AAsecret-telegram-token"

if shutil.which("bwrap") is None or shutil.which("setpriv") is None:
    pytest.fail(
        "bubblewrap and setpriv are needed: apt-get install bubblewrap util-linux "
        "(tests/fakes/install_bwrap.sh)",
        pytrace=False,
    )


@pytest.fixture
def setup(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    """The scripted agent (logging into its workspace, where a sandboxed agent may write) and
    the environment of a CLI run with the sandbox left to its default."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    agent = FakeAgent(workspace / "agent-log.jsonl", workspace / "agent-state")
    agent.state_dir.mkdir()
    env = {k: v for k, v in cli_env.items() if k != "SWITCHBOARD_AGENT_SANDBOX"}
    env |= {
        "SWITCHBOARD_WORKSPACE": str(workspace),
        "SWITCHBOARD_STATE": str(tmp_path / "state" / "state.db"),
        "SWITCHBOARD_AGENT_COMMAND": agent.command(),
        "SWITCHBOARD_TELEGRAM__TOKEN": TOKEN,
        # `ask` cannot approve the agent's terminals; the gate has its own tests
        # (tests/test_gate_client_requests.py)
        "SWITCHBOARD_ALLOW_UNGATED_TOOLS": "true",
    }
    return env


def _cli(env: dict[str, str], *args: str, stdin: str = "", prefix: tuple[str, ...] = ()) -> Any:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        cwd=Path(env["SWITCHBOARD_WORKSPACE"]).parent,
    )


def _reply_outputs(stdout: str) -> list[str]:
    """The terminal outputs the scripted agent printed as `reply:<json>` chunks."""
    outputs = []
    for part in stdout.split("reply:")[1:]:
        decoded, _ = json.JSONDecoder().raw_decode(part)
        result = decoded.get("result") or {}
        if isinstance(result, dict) and "output" in result:
            outputs.append(result["output"])
    return outputs


def _terminal(command: str) -> str:
    return script(
        {"request": {"method": "terminal/create", "params": {"command": command}}, "save": "t"},
        {
            "request": {
                "method": "terminal/wait_for_exit",
                "params": {"terminalId": "$t.terminalId"},
            }
        },
        {"request": {"method": "terminal/output", "params": {"terminalId": "$t.terminalId"}}},
    )


def test_doctor_says_the_agent_runs_in_bubblewrap_by_default(setup, tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = setup
    result = _cli(env, "doctor")
    home = tmp_path / "state" / "agent-home"
    line = f"ok   agent sandbox: bubblewrap (mount, PID, IPC namespaces; home {home})"
    assert line in result.stdout.splitlines(), result.stdout + result.stderr
    assert "ok   agent terminals: nice 10" in result.stdout
    assert "ok   agent starts" in result.stdout, result.stdout
    assert home.is_dir() and home.stat().st_mode & 0o777 == 0o700


def test_doctor_says_what_off_gives_up(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    result = _cli({**env, "SWITCHBOARD_AGENT_SANDBOX": "off"}, "doctor")
    assert (
        "ok   agent sandbox: off: agents run as this user and can read whatever it can read, "
        "Switchboard's state and config included"
    ) in result.stdout.splitlines(), result.stdout


def test_auto_without_bubblewrap_on_path_runs_the_agent_unsandboxed_saying_so_once(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    no_bwrap = Path(env["SWITCHBOARD_WORKSPACE"]).parent / "bin"
    no_bwrap.mkdir()
    (no_bwrap / "sh").symlink_to("/bin/sh")
    result = _cli({**env, "PATH": str(no_bwrap)}, "ask", _terminal("echo $$"))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "run unsandboxed" in line]
    assert len(warnings) == 1 and "bubblewrap is not installed" in warnings[0]
    (pid,) = _reply_outputs(result.stdout)
    assert int(pid) > 2  # a host pid: no PID namespace of its own


def test_auto_with_bubblewrap_runs_the_agent_in_its_own_pid_namespace(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    result = _cli(env, "ask", _terminal("ls /proc | grep -c '^[0-9]'"))
    assert result.returncode == 0, result.stderr
    (count,) = _reply_outputs(result.stdout)
    assert int(count) < 6


def test_a_required_sandbox_that_cannot_work_stops_the_start_in_one_sentence(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    no_bwrap = {**env, "PATH": "/nonexistent", "SWITCHBOARD_AGENT_SANDBOX": "bwrap"}
    result = _cli(no_bwrap, "ask", "hi")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "Invalid setting SWITCHBOARD_AGENT_SANDBOX: is bwrap, but bubblewrap cannot confine "
        "agents here: bubblewrap is not installed"
    )
    assert "Traceback" not in result.stderr


def test_an_unknown_agent_user_stops_the_start_in_one_sentence(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    result = _cli({**env, "SWITCHBOARD_AGENT_USER": "no-such-user-here"}, "ask", "hi")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "Invalid setting SWITCHBOARD_AGENT_USER: agents cannot run as 'no-such-user-here': there "
        "is no such user on this host"
    )


def test_the_agent_and_its_terminals_run_as_the_agent_user(cli_env) -> None:  # type: ignore[no-untyped-def]
    """The agent's user must reach its command (the system's Python, not one under /root) and
    its workspace (here a directory of its own under a world-searchable one)."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python is not None, "the agent-user test needs a system python3: apt-get install python3"
    nobody = pwd.getpwnam("nobody")
    root = Path(tempfile.mkdtemp(prefix="switchboard-agent-user-"))
    try:
        root.chmod(0o755)
        workspace = root / "workspace"
        workspace.mkdir()
        os.chown(workspace, nobody.pw_uid, nobody.pw_gid)
        agent = FakeAgent(workspace / "agent-log.jsonl", workspace / "agent-state")
        # a copy the agent's user can read wherever the checkout is (under a 0700 folder, say)
        script_copy = root / "fake_agent.py"
        shutil.copyfile(FAKE_AGENT, script_copy)
        script_copy.chmod(0o644)
        command = (
            agent.command()
            .replace(shlex.quote(sys.executable), python, 1)
            .replace(shlex.quote(str(FAKE_AGENT)), shlex.quote(str(script_copy)), 1)
        )
        env = {k: v for k, v in cli_env.items() if k != "SWITCHBOARD_AGENT_SANDBOX"}
        env |= {
            "SWITCHBOARD_WORKSPACE": str(workspace),
            "SWITCHBOARD_STATE": str(root / "state" / "state.db"),
            "SWITCHBOARD_AGENT_COMMAND": command,
            "SWITCHBOARD_AGENT_USER": "nobody",
            "SWITCHBOARD_ALLOW_UNGATED_TOOLS": "true",  # `ask` cannot approve its terminal
        }
        result = _cli(env, "ask", _terminal("id -u; id -g; echo hi > mine; stat -c %u mine"))
        assert result.returncode == 0, result.stderr
        (ids,) = _reply_outputs(result.stdout)
        assert ids.split() == [str(nobody.pw_uid), str(nobody.pw_gid), str(nobody.pw_uid)]
        assert (root / "state" / "agent-home").stat().st_uid == nobody.pw_uid
        assert (workspace / "mine").stat().st_uid == nobody.pw_uid
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_status_says_how_the_agent_is_isolated(setup) -> None:  # type: ignore[no-untyped-def]
    env = setup
    sandboxed = _cli(env, "chat", stdin="/status\n")
    assert "Isolation: bubblewrap sandbox" in sandboxed.stdout, sandboxed.stdout + sandboxed.stderr
    off = _cli({**env, "SWITCHBOARD_AGENT_SANDBOX": "off"}, "chat", stdin="/status\n")
    assert "Isolation: none, the agent runs as Switchboard unsandboxed" in off.stdout


def test_an_unsandboxed_agent_cannot_read_switchboards_environment(setup) -> None:  # type: ignore[no-untyped-def]
    """Switchboard marks itself non-dumpable: a process of the same user without
    CAP_SYS_PTRACE (every process here runs without capabilities, as a non-root deployment
    would) cannot read its /proc/<pid>/environ, although its own user's files it can."""
    env = setup
    no_caps = ("setpriv", "--bounding-set", "-all", "--inh-caps", "-all")
    command = "P=$(cut -d' ' -f4 /proc/$PPID/stat); tr '\\0' '\\n' < /proc/$P/environ; echo end"
    env = {**env, "SWITCHBOARD_AGENT_SANDBOX": "off"}
    result = _cli(env, "ask", _terminal(command), prefix=no_caps)
    assert result.returncode == 0, result.stderr
    (output,) = _reply_outputs(result.stdout)
    assert "Permission denied" in output and TOKEN not in output and "SWITCHBOARD_" not in output
    # the same read of a process that did not mark itself works: the check above can fail
    sleeper = subprocess.Popen([*no_caps, "sleep", "30"], env={"SECRET_HERE": TOKEN})
    try:
        read = subprocess.run(
            [*no_caps, "cat", f"/proc/{sleeper.pid}/environ"], capture_output=True, check=False
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert TOKEN.encode() in read.stdout
