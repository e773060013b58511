"""`switchboard doctor` with an agent the tool gate refuses: the refusal is its own check ("tool
gate"), one line, and the checks after it (the agent signs in, the state store) still run.
The real CLI and a real fake-agent subprocess."""

from __future__ import annotations

import shlex

from tests.conftest import FakeAgent


def _doctor(run_cli, preset: str, command: str):  # type: ignore[no-untyped-def]
    env = {"SWITCHBOARD_STATE": ":memory:"}  # run_cli's directory is the workspace
    return run_cli("doctor", "--agent", preset, "--agent-command", command, env=env)


def _lines(stdout: str) -> dict[str, str]:
    """Each check's line by what it checks ("agent starts", "tool gate", ...)."""
    checks = {}
    for line in stdout.splitlines():
        what = line[5:].split(":", 1)[0]
        checks[what] = line
    return checks


def test_a_gate_refused_at_the_session_is_its_own_check_and_the_rest_still_run(
    run_cli, fake_agent: FakeAgent
):
    command = fake_agent.command("--modes", "yolo,bypass", dialect="claude")  # none asks first
    result = _doctor(run_cli, "claude", command)
    assert result.returncode == 1
    checks = _lines(result.stdout)
    assert checks["tool gate"].startswith("FAIL tool gate: Switchboard will not start")
    assert "SWITCHBOARD_ALLOW_UNGATED_TOOLS" in checks["tool gate"]
    for after in ("agent starts", "agent signed in", "state store"):
        assert checks[after].startswith("ok  "), after
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == [checks["tool gate"]]
    assert list(checks).index("tool gate") < list(checks).index("agent signed in")
    assert not fake_agent.frames_in("session/prompt")
    assert result.stderr == ""


def test_a_gate_refused_by_the_command_line_still_checks_that_the_agent_starts(
    run_cli, fake_agent: FakeAgent
):
    # the trusting flag is the shell's $0: the agent it starts never sees it
    command = shlex.join(["sh", "-c", f"exec {fake_agent.command()}", "--trust-all-tools"])
    result = _doctor(run_cli, "kiro", command)
    assert result.returncode == 1
    checks = _lines(result.stdout)
    assert checks["tool gate"].startswith("FAIL tool gate:")
    assert "--trust-all-tools" in checks["tool gate"]
    for after in ("agent found", "agent starts", "agent signed in", "state store"):
        assert checks[after].startswith("ok  "), after
    assert len(fake_agent.frames_in("session/new")) == 1
    assert result.stderr == ""  # no warning that tools run ungated: doctor prompts nothing


def test_a_gate_that_holds_says_how(run_cli, fake_agent: FakeAgent):
    command = fake_agent.command("--modes", "auto,default", dialect="claude")
    result = _doctor(run_cli, "claude", command)
    assert result.returncode == 0, result.stdout
    assert _lines(result.stdout)["tool gate"] == (
        "ok   tool gate: the agent asks before tools (mode default)"
    )
