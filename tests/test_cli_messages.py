"""Every failure a person can meet through the CLI is one sentence that says what happened and
what to do: the real `switchboard` command against the scripted fake agent (a real subprocess)
and, for `run`, the fake Telegram Bot API."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FakeAgent, script
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.process import run_env
from tests.harness.telegram import switchboard_run, telegram_env

ANTHROPIC_KEY = "sk-ant-api03-Xq7vB2mN9kLp4RtY8wZc1Df6Gh3Jk5Ls0Qe"
TELEGRAM_TOKEN = "123456789:" + "A" * 35  # shaped like a real one, so doctor's shape check passes


def ask(run_cli, agent: FakeAgent, text: str, *agent_opts: str, env=None):  # type: ignore[no-untyped-def]
    return run_cli(
        "ask", "--agent", "kiro", "--agent-command", agent.command(*agent_opts), text, env=env
    )


def said(stderr: str) -> str:
    """The one sentence for the person: the line on stderr that is not a JSON log record."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("{")]
    assert len(lines) == 1, stderr
    return lines[0]


def logged(stderr: str, level: str = "warning") -> list[str]:
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [record["msg"] for record in records if record["level"] == level]


# ---- the agent does not start ----------------------------------------------------------------
def test_an_initialize_timeout_names_doctor_and_logs_the_agents_stderr_tail(run_cli, fake_agent):
    result = ask(
        run_cli,
        fake_agent,
        "hi",
        "--init-hang",
        "--stderr-on-start",
        f"booting: waiting for the model gateway with key {ANTHROPIC_KEY}",
        env={"SWITCHBOARD_INITIALIZE_TIMEOUT": "1"},
    )
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert "did not answer initialize within 1 s" in sentence
    assert "`switchboard doctor`" in sentence and "log" in sentence
    warnings = logged(result.stderr)
    assert any("waiting for the model gateway" in w for w in warnings), result.stderr
    assert ANTHROPIC_KEY not in result.stderr and "[redacted]" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_agent_that_dies_at_start_names_doctor_and_its_stderr_is_logged(run_cli, fake_agent):
    result = ask(
        run_cli,
        fake_agent,
        "hi",
        "--stderr-on-start",
        "fatal: unknown flag --colour",
        "--exit-on-start",
        "3",
    )
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert "stopped unexpectedly (exit code 3)" in sentence
    assert "`switchboard doctor`" in sentence
    assert any("fatal: unknown flag --colour" in w for w in logged(result.stderr))


def test_a_clean_run_logs_no_warning_about_the_agent_stopping(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "hi")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# ---- retries are told only when they happened -----------------------------------------------
THROTTLED = {"code": -32603, "message": "Internal error", "data": "ThrottlingException: Rate"}


def test_a_throttled_turn_says_how_many_automatic_retries_it_went_through(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, script({"error": THROTTLED}))
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert "kept doing so through 3 automatic retries" in sentence
    assert "Wait a minute" in sentence


def test_without_retries_the_sentence_claims_none(run_cli, fake_agent):
    result = ask(
        run_cli,
        fake_agent,
        script({"error": THROTTLED}),
        env={"SWITCHBOARD_RETRY__TRANSIENT_RETRIES": "0"},
    )
    assert result.returncode == 1
    assert len(fake_agent.frames_in("session/prompt")) == 1
    sentence = said(result.stderr)
    assert "throttling" in sentence and "Wait a minute" in sentence
    assert "retr" not in sentence


def test_an_agent_that_keeps_dying_says_how_often_it_was_restarted(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_DIE_BEFORE", env={"SWITCHBOARD_RETRY__RECONNECTS": "1"})
    assert result.returncode == 1
    assert fake_agent.spawns() == 2
    sentence = said(result.stderr)
    assert "before it answered and kept doing so through 1 automatic retry." in sentence
    assert "`switchboard doctor`" in sentence


def test_an_agent_that_dies_once_without_reconnects_claims_no_retry(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_DIE_BEFORE", env={"SWITCHBOARD_RETRY__RECONNECTS": "0"})
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert "stopped unexpectedly" in sentence and "retr" not in sentence
    assert any("stopped unexpectedly" in w for w in logged(result.stderr))


# ---- the agent's own words ------------------------------------------------------------------
def test_an_error_we_do_not_know_is_quoted_as_the_agents_words(run_cli, fake_agent):
    error = {"code": -32603, "message": "Internal error", "data": "Tool host crashed: status 3"}
    result = ask(run_cli, fake_agent, script({"error": error}))
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert sentence.startswith('The agent reported an error: "Tool host crashed: status 3".')
    assert "again" in sentence  # and what to do
    assert len(fake_agent.frames_in("session/prompt")) == 1


# ---- the tool gate --------------------------------------------------------------------------
def test_the_tool_gate_refusal_names_the_configured_generic_agent_and_what_to_do(
    run_cli, fake_agent
):
    command = fake_agent.command("--modes", "accept-edits,yolo", dialect="generic")
    result = run_cli("ask", "--agent", "generic", "--agent-command", command, "hi")
    assert result.returncode == 1
    sentence = said(result.stderr)
    # the name it gave in initialize and the command actually configured, not a preset's label
    assert sentence.startswith(
        "Switchboard will not start fake-agent (python fake_agent.py, the generic preset), "
    ), sentence
    assert "it offers the modes 'accept-edits', 'yolo'" in sentence
    assert "SWITCHBOARD_AGENT_MODE" in sentence
    assert "SWITCHBOARD_ALLOW_UNGATED_TOOLS=true" in sentence
    assert ". " not in sentence and sentence.endswith(".")  # one sentence
    assert not fake_agent.frames_in("session/prompt")


def test_the_tool_gate_refusal_for_a_trusting_flag_says_to_remove_it(run_cli, fake_agent):
    command = fake_agent.command() + " --trust-all-tools"
    result = run_cli("ask", "--agent", "kiro", "--agent-command", command, "hi")
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert f"{Path(sys.executable).name} fake_agent.py (the kiro preset)" in sentence
    assert "remove --trust-all-tools from the agent command" in sentence
    assert fake_agent.spawns() == 0


# ---- a bad command-line value names the option -----------------------------------------------
def test_a_bad_timeout_names_the_option_and_its_setting(run_cli):
    result = run_cli("ask", "--timeout", "-1", "hi")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Invalid --timeout (SWITCHBOARD_PROMPT_TIMEOUT): must be greater than 0"
    )


def test_a_bad_value_from_the_environment_names_only_the_setting(run_cli):
    result = run_cli("ask", "hi", env={"SWITCHBOARD_PROMPT_TIMEOUT": "-1"})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Invalid setting SWITCHBOARD_PROMPT_TIMEOUT: must be greater than 0"
    )


def test_a_cwd_that_does_not_exist_is_named_and_said_so(run_cli, fake_agent, tmp_path):
    missing = tmp_path / "no-such-dir"
    result = run_cli("ask", "--agent-command", fake_agent.command(), "--cwd", str(missing), "hi")
    assert result.returncode == 1
    assert said(result.stderr) == f"Invalid --cwd (SWITCHBOARD_WORKSPACE): {missing} does not exist"
    assert fake_agent.spawns() == 0


def test_a_cwd_that_is_a_file_is_named_and_said_so(run_cli, fake_agent, tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("x")
    result = run_cli("chat", "--agent-command", fake_agent.command(), "--cwd", str(plain))
    assert result.returncode == 1
    assert (
        said(result.stderr) == f"Invalid --cwd (SWITCHBOARD_WORKSPACE): {plain} is not a directory"
    )


def test_an_agent_command_with_an_unbalanced_quote_is_named(run_cli):
    result = run_cli("doctor", "--agent-command", 'my-agent --name "half')
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert sentence.startswith("Invalid --agent-command (SWITCHBOARD_AGENT_COMMAND): ")
    assert "quote" in sentence


def test_a_model_the_agent_does_not_offer_names_the_option(run_cli, fake_agent):
    result = run_cli(
        "ask",
        "--agent-command",
        fake_agent.command("--models", "fast,smart"),
        "--model",
        "huge",
        "hi",
    )
    assert result.returncode == 1
    sentence = said(result.stderr)
    assert sentence.startswith("Invalid --model (SWITCHBOARD_MODEL): ")
    assert "'huge'" in sentence and "fast, smart" in sentence
    assert not fake_agent.frames_in("session/prompt")


# ---- the config file ----------------------------------------------------------------------
def test_a_missing_config_file_is_warned_about_on_stderr_by_default(run_cli, fake_agent, tmp_path):
    missing = tmp_path / "switchboard.json"
    result = ask(run_cli, fake_agent, "hi", env={"SWITCHBOARD_CONFIG": str(missing)})
    assert result.returncode == 0, result.stderr
    (warning,) = logged(result.stderr)
    assert str(missing) in warning and "does not exist" in warning


def test_unknown_keys_in_the_config_file_are_named_at_every_depth(run_cli, fake_agent, tmp_path):
    path = tmp_path / "switchboard.json"
    path.write_text(json.dumps({"telgram": {"token": ""}, "telegram": {"tokn": ""}, "model": ""}))
    result = ask(run_cli, fake_agent, "hi", env={"SWITCHBOARD_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    (warning,) = logged(result.stderr)
    assert "telgram" in warning and "telegram.tokn" in warning
    assert "model" not in warning.split(":")[-1]


def test_config_warnings_follow_the_configured_log_level(run_cli, fake_agent, tmp_path):
    env = {"SWITCHBOARD_CONFIG": str(tmp_path / "absent.json"), "SWITCHBOARD_LOG_LEVEL": "error"}
    result = ask(run_cli, fake_agent, "hi", env=env)
    assert result.returncode == 0
    assert result.stderr == ""


def test_config_warnings_are_shown_before_an_invalid_option_stops_the_command(run_cli, tmp_path):
    path = tmp_path / "switchboard.json"
    path.write_text(json.dumps({"agnet": "claude"}))
    result = run_cli("ask", "--timeout", "0", "hi", env={"SWITCHBOARD_CONFIG": str(path)})
    assert result.returncode == 1
    assert any("agnet" in w for w in logged(result.stderr))
    assert said(result.stderr).startswith("Invalid --timeout (SWITCHBOARD_PROMPT_TIMEOUT)")


# ---- --version ------------------------------------------------------------------------------
def test_version_prints_the_installed_version_and_exits_zero(run_cli):
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout == f"switchboard {importlib.metadata.version('switchboard')}\n"


# ---- a surface nobody can use ---------------------------------------------------------------
def test_doctor_fails_a_surface_whose_allowlist_is_empty(run_cli, fake_agent):
    env = {"SWITCHBOARD_TELEGRAM__TOKEN": TELEGRAM_TOKEN, "SWITCHBOARD_STATE": ":memory:"}
    result = run_cli("doctor", "--agent-command", fake_agent.command(), env=env)
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1
    assert "Telegram access" in failed[0]
    assert "SWITCHBOARD_TELEGRAM__ALLOWED_USERS is empty, so nobody can use it" in failed[0]
    assert any(line.startswith("ok   Telegram token") for line in result.stdout.splitlines())


def test_doctor_passes_a_surface_with_someone_allowed(run_cli, fake_agent):
    env = {
        "SWITCHBOARD_TELEGRAM__TOKEN": TELEGRAM_TOKEN,
        "SWITCHBOARD_TELEGRAM__ADMINS": "42",
        "SWITCHBOARD_STATE": ":memory:",  # the working directory is the workspace
    }
    result = run_cli("doctor", "--agent-command", fake_agent.command(), env=env)
    assert result.returncode == 0, result.stdout
    assert "access" not in result.stdout


@pytest.mark.anyio
async def test_run_warns_on_stderr_that_nobody_can_use_a_surface_and_keeps_running(
    tmp_path: Path, workspace: Path, fake_agent: FakeAgent, cli_env: dict[str, str]
) -> None:
    env = cli_env | run_env(fake_agent, workspace)
    stderr_path = tmp_path / "run.stderr"
    async with FakeBotApi() as api:
        env |= telegram_env(api)  # and no SWITCHBOARD_TELEGRAM__ALLOWED_USERS
        with stderr_path.open("wb") as sink:
            async with switchboard_run(env, api, tmp_path, stdout=subprocess.DEVNULL, stderr=sink):
                pass
    stderr = stderr_path.read_text()
    assert (
        "Warning: Telegram is configured but SWITCHBOARD_TELEGRAM__ALLOWED_USERS is empty: "
        "nobody can use it." in stderr
    )


def test_doctor_says_where_the_stderr_of_an_agent_that_dies_at_start_is(run_cli, fake_agent):
    command = fake_agent.command("--stderr-on-start", "fatal: no config", "--exit-on-start", "3")
    result = run_cli("doctor", "--agent-command", command, env={"SWITCHBOARD_STATE": ":memory:"})
    assert result.returncode == 1
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == (
        "FAIL agent starts: the agent process stopped before it was ready (exit code 3); "
        "its last stderr lines are in the log above"
    )
    assert any("fatal: no config" in w for w in logged(result.stderr))


def test_doctor_names_the_request_an_agent_stuck_at_start_did_not_answer(run_cli, fake_agent):
    result = run_cli(
        "doctor",
        "--agent-command",
        fake_agent.command("--init-hang"),
        env={"SWITCHBOARD_INITIALIZE_TIMEOUT": "1", "SWITCHBOARD_STATE": ":memory:"},
    )
    assert result.returncode == 1
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "did not answer initialize within 1 s" in failed
    assert any("did not answer initialize" in w for w in logged(result.stderr))
