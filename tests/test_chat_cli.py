"""`switchboard chat`, `run` and `doctor` end to end: the real CLI with stdin not a terminal (each
line waits for the previous reply; a number answers a pending approval) and a real fake-agent
subprocess. What the agent was sent is read from the fake agent's frame log."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    LISTS_COMPACT,
    STUBBORN,
    STUBBORN_OPTS,
    CliResult,
    FakeAgent,
    pid_alive,
    production_graces,
    script,
)

LOAD_ERROR_ACTIVE = json.dumps(
    {
        "code": -32603,
        "message": "Internal error",
        "data": "Failed to start session: Session is active in another process (PID 4242)",
    }
)
NOT_RESTORED = "could not be restored"


def chat_argv(agent: FakeAgent, *options: str, agent_opts=(), dialect="kiro") -> list[str]:  # type: ignore[no-untyped-def]
    return [
        sys.executable,
        "-m",
        "bot",
        "chat",
        "--agent",
        dialect,
        "--agent-command",
        agent.command(*agent_opts, dialect=dialect),
        *options,
    ]


@pytest.fixture
def chat(cli_env: dict[str, str], tmp_path: Path) -> Callable[..., CliResult]:
    """Runs `switchboard chat` with the given lines on stdin (then EOF)."""

    def run(  # type: ignore[no-untyped-def]
        agent: FakeAgent,
        lines: Sequence[str],
        *options: str,
        agent_opts=(),
        dialect="kiro",
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> CliResult:
        proc = subprocess.run(
            chat_argv(agent, *options, agent_opts=agent_opts, dialect=dialect),
            input="".join(line + "\n" for line in lines),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**cli_env, **(env or {})},
            cwd=tmp_path,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


def prompts(agent: FakeAgent) -> list[str]:
    return [f["params"]["prompt"][0]["text"] for f in agent.frames_in("session/prompt")]


def permission_answers(agent: FakeAgent) -> list[dict[str, Any]]:
    """The `outcome` of every response we sent to a session/request_permission."""
    asked = {
        r["frame"]["id"]
        for r in agent.records()
        if r.get("dir") == "out"
        and r.get("frame", {}).get("method") == "session/request_permission"
    }
    return [
        r["frame"]["result"]["outcome"]
        for r in agent.records()
        if r.get("dir") == "in"
        and "method" not in r.get("frame", {})
        and r["frame"].get("id") in asked
        and "result" in r["frame"]
    ]


def chunks_sent(agent: FakeAgent) -> list[dict[str, Any]]:
    return [
        r["frame"]
        for r in agent.records()
        if r.get("dir") == "out" and r.get("frame", {}).get("method") == "session/update"
    ]


def read_until(proc: subprocess.Popen, text: str, timeout: float = 10) -> str:  # type: ignore[type-arg]
    """What the chat printed so far, once it contains `text` (stdout is read raw, unbuffered)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} not printed; got {seen!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed before {text!r}; got {seen!r}"
            seen += chunk
    return seen.decode()


def wait_until(condition: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def all_gone(agent: FakeAgent) -> bool:
    return wait_until(lambda: not any(pid_alive(pid) for pid in agent.pids()), timeout=5)


# ---- turns and commands ------------------------------------------------------------------------
def test_replies_print_in_the_order_the_lines_were_typed(chat, fake_agent):
    result = chat(fake_agent, ["first", "", "SCN_STREAM", "   ", "third"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: first\nHello, world\nEcho: third\n"
    assert prompts(fake_agent) == ["first", "SCN_STREAM", "third"]  # blank lines send nothing
    assert fake_agent.spawns() == 1


def test_separate_agent_messages_are_shown_as_separate_paragraphs(chat, fake_agent):
    two_messages = script(
        {"chunk": "I can", "messageId": "m1"},
        {"chunk": " help.", "messageId": "m1"},
        {"chunk": "**Notice:** continuing once", "messageId": "m2"},
    )
    result = chat(fake_agent, [two_messages, "/status"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("I can help.\n\n**Notice:** continuing once\n")
    assert result.stdout.endswith("Turn: idle\n")


def test_help_lists_every_command_and_asks_the_agent_nothing(chat, fake_agent):
    result = chat(fake_agent, ["/help"])
    assert result.returncode == 0, result.stderr
    for command in ("/new", "/compact", "/stop", "/status", "/model", "/help"):
        assert command in result.stdout
    assert "Anything else is sent to the agent." in result.stdout
    assert prompts(fake_agent) == []


def test_help_also_names_the_slash_commands_the_agent_advertises(chat, fake_agent):
    advertise = script(
        {
            "update": {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "review", "description": "review the diff"},
                    {"name": "compact", "description": "compact the context"},
                ],
            }
        },
        {"chunk": "ok"},
    )
    result = chat(fake_agent, [advertise, "/help"])
    assert result.returncode == 0, result.stderr
    assert "The agent also understands: /review" in result.stdout
    assert result.stdout.count("/compact") == 1  # ours already; not listed twice


def test_status_shows_agent_model_workspace_and_an_idle_turn(chat, fake_agent, tmp_path):
    result = chat(fake_agent, ["hello", "/status"], agent_opts=("--models", "m1,m2"))
    assert result.returncode == 0, result.stderr
    status = result.stdout.split("Echo: hello\n", 1)[1]
    assert status.startswith("Agent: kiro (")
    assert "fake_agent.py" in status
    assert "Model: m1\n" in status
    assert f"Workspace: {tmp_path}\n" in status
    assert status.endswith("Turn: idle\n")
    assert prompts(fake_agent) == ["hello"]


def test_status_shows_the_context_usage_the_agent_reports(chat, fake_agent):
    usage = script(
        {"notify": {"method": "_kiro.dev/metadata", "params": {"contextUsagePercentage": 41.2}}},
        {"chunk": "ok"},
    )
    result = chat(fake_agent, [usage, "/status"])
    assert result.returncode == 0, result.stderr
    assert "Context: 41% used" in result.stdout


def test_model_lists_the_advertised_models_and_marks_the_current_one(chat, fake_agent):
    result = chat(fake_agent, ["/model"], agent_opts=("--models", "a,b"))
    assert result.returncode == 0, result.stderr
    assert "Models: a (current), b" in result.stdout
    assert "/model ID" in result.stdout
    assert not fake_agent.frames_in("session/set_model")


def test_model_with_an_id_switches_the_session_with_set_model(chat, fake_agent):
    result = chat(fake_agent, ["/model b", "/model"], agent_opts=("--models", "a,b"))
    assert result.returncode == 0, result.stderr
    assert "Model set to b." in result.stdout
    assert "Models: a, b (current)" in result.stdout
    (frame,) = fake_agent.frames_in("session/set_model")
    assert frame["params"]["modelId"] == "b"


def test_model_switches_through_set_config_option_when_the_agent_offers_config_options(
    chat, fake_agent
):
    result = chat(fake_agent, ["/model b"], agent_opts=("--models", "a,b", "--config-options"))
    assert result.returncode == 0, result.stderr
    assert "Model set to b." in result.stdout
    switched = fake_agent.frames_in("session/set_config_option") + fake_agent.frames_in(
        "session/set_model"
    )
    assert len(switched) == 1
    params = switched[0]["params"]
    assert params.get("value", params.get("modelId")) == "b"


def test_an_unknown_model_id_is_refused_without_asking_the_agent(chat, fake_agent):
    result = chat(fake_agent, ["/model nope", "/status"], agent_opts=("--models", "a,b"))
    assert result.returncode == 0, result.stderr
    assert "does not offer 'nope'; switch with /model and one of: a, b." in result.stdout
    assert "Model: a\n" in result.stdout
    assert not fake_agent.frames_in("session/set_model")
    assert not fake_agent.frames_in("session/set_config_option")


def test_new_starts_a_fresh_session_for_the_next_message(chat, fake_agent):
    result = chat(fake_agent, ["hello", "/new", "again"])
    assert result.returncode == 0, result.stderr
    assert "Started a fresh conversation" in result.stdout
    assert result.stdout.endswith("Echo: again\n")
    assert len(fake_agent.frames_in("session/new")) == 2
    sessions = [f["params"]["sessionId"] for f in fake_agent.frames_in("session/prompt")]
    assert sessions[0] != sessions[1]
    assert fake_agent.spawns() == 1


def test_new_drops_the_binding_so_a_restart_does_not_resume_the_old_session(chat, fake_agent):
    first = chat(fake_agent, ["hello", "/new"])
    assert first.returncode == 0, first.stderr
    second = chat(fake_agent, ["again"])
    assert second.returncode == 0, second.stderr
    assert second.stdout == "Echo: again\n"  # no "not restored" notice: nothing to restore
    assert not fake_agent.frames_in("session/load")
    assert len(fake_agent.frames_in("session/new")) == 2


def test_compact_goes_to_the_agent_as_the_prompt_text_compact(chat, fake_agent):
    result = chat(fake_agent, ["hello", "/compact"], agent_opts=LISTS_COMPACT)
    assert result.returncode == 0, result.stderr
    assert prompts(fake_agent) == ["hello", "/compact"]
    assert result.stdout.endswith("Echo: /compact\n")


def test_an_unknown_slash_command_is_passed_to_the_agent_as_prompt_text(chat, fake_agent):
    result = chat(fake_agent, ["/foo bar baz"])
    assert result.returncode == 0, result.stderr
    assert prompts(fake_agent) == ["/foo bar baz"]
    assert result.stdout == "Echo: /foo bar baz\n"


def test_stop_with_nothing_running_says_so(chat, fake_agent):
    result = chat(fake_agent, ["/stop"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Nothing is running.\n"
    assert not fake_agent.frames_in("session/cancel")


def test_stdin_eof_ends_chat_with_exit_zero_after_the_last_reply(cli_env, fake_agent, tmp_path):
    proc = subprocess.run(
        chat_argv(fake_agent),
        input="SCN_STREAM\nlast line without a newline",
        capture_output=True,
        text=True,
        timeout=30,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello, world\nEcho: last line without a newline\n"
    assert "Traceback" not in proc.stderr
    assert all_gone(fake_agent)


def test_chat_with_stdin_from_dev_null_ends_cleanly(run_cli, fake_agent):
    result = run_cli("chat", "--agent-command", fake_agent.command())  # stdin is /dev/null
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""


def test_chat_with_stdin_from_a_regular_file_answers_every_line(cli_env, fake_agent, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("first\nSCN_STREAM\n")
    with lines.open("rb") as stdin:
        proc = subprocess.run(
            chat_argv(fake_agent),
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            env=cli_env,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Echo: first\nHello, world\n"


def test_chat_exits_1_naming_a_missing_agent_command(cli_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "chat", "--agent-command", "no-such-agent-binary acp"],
        input="hello\nsecond\n",
        capture_output=True,
        text=True,
        timeout=30,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stdout.count("no-such-agent-binary") == 1  # said once; the chat then ended
    assert "--agent-command" in proc.stdout
    assert proc.stdout.endswith("\n")
    assert "Traceback" not in proc.stderr


def test_chat_exits_1_when_the_agent_dies_at_initialize(chat, fake_agent):
    result = chat(fake_agent, ["hello", "second"], agent_opts=("--exit-on-start", "3"))
    assert result.returncode == 1
    assert result.stdout.count("stopped unexpectedly (exit code 3)") == 1
    assert not fake_agent.frames_in("session/prompt")
    assert "Traceback" not in result.stderr
    assert all_gone(fake_agent)


# ---- approvals ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "option_id", "outcome_line"),
    [("1", "allow_once", "Answered: Yes"), ("3", "reject_once", "Answered: No")],
)
def test_typing_a_number_answers_the_approval_with_that_option(
    chat, fake_agent, typed, option_id, outcome_line
):
    result = chat(fake_agent, ["SCN_PERMISSION", typed])
    assert result.returncode == 0, result.stderr
    assert "The agent wants to use a tool:" in result.stdout
    assert "Run echo hi (execute)" in result.stdout
    assert "  1) Yes\n  2) Always\n  3) No\n" in result.stdout
    assert outcome_line in result.stdout
    assert result.stdout.endswith(f"permission:{option_id}\n")
    assert permission_answers(fake_agent) == [{"outcome": "selected", "optionId": option_id}]
    assert prompts(fake_agent) == ["SCN_PERMISSION"]  # the number was not a prompt


def test_two_approvals_in_one_turn_are_answered_one_number_each(chat, fake_agent):
    twice = script({"permission": {}}, {"permission": {}})
    result = chat(fake_agent, [twice, "1", "2"], env={"SWITCHBOARD_APPROVAL_TIMEOUT": "2"})
    assert result.returncode == 0, result.stderr
    assert "already answered" not in result.stdout
    assert permission_answers(fake_agent) == [
        {"outcome": "selected", "optionId": "allow_once"},
        {"outcome": "selected", "optionId": "allow_always"},
    ]


def test_a_number_with_no_approval_pending_is_an_ordinary_message(chat, fake_agent):
    result = chat(fake_agent, ["hello", "2"])
    assert result.returncode == 0, result.stderr
    assert prompts(fake_agent) == ["hello", "2"]
    assert result.stdout == "Echo: hello\nEcho: 2\n"


@pytest.mark.parametrize(
    ("dialect", "agent_opts", "reject_id"),
    [("kiro", (), "reject_once"), ("codex", ("--modes", "read-only,auto"), "cancel")],
)
def test_no_answer_in_time_selects_the_reject_option_never_cancelled(
    cli_env, fake_agent, tmp_path, dialect, agent_opts, reject_id
):
    proc = subprocess.Popen(
        chat_argv(fake_agent, agent_opts=agent_opts, dialect=dialect),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**cli_env, "SWITCHBOARD_APPROVAL_TIMEOUT": "1"},
        cwd=tmp_path,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"SCN_PERMISSION\n")  # stdin stays open: someone could still answer
    proc.stdin.flush()
    shown = read_until(proc, "No answer within 1 s: rejected.")
    out, err = _communicate_within(proc, fake_agent, 10)
    assert proc.returncode == 0, err
    assert (shown + out.decode()).endswith(f"permission:{reject_id}\n")
    assert permission_answers(fake_agent) == [{"outcome": "selected", "optionId": reject_id}]
    assert not fake_agent.frames_in("session/cancel")


def test_end_of_input_with_an_approval_pending_rejects_it_at_once_and_ends(chat, fake_agent):
    started = time.monotonic()
    result = chat(fake_agent, ["SCN_PERMISSION"])  # the approval timeout is 5 minutes
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10
    assert "Type a number to answer." in result.stdout
    assert result.stdout.endswith("permission:reject_once\n")
    assert permission_answers(fake_agent) == [{"outcome": "selected", "optionId": "reject_once"}]
    assert all_gone(fake_agent)


def test_an_answer_that_is_not_a_number_of_the_menu_shows_the_menu_again(chat, fake_agent):
    result = chat(fake_agent, ["SCN_PERMISSION", "yes please", "7", "1"])
    assert result.returncode == 0, result.stderr
    menu = "  1) Yes\n  2) Always\n  3) No\n  4) Trust this tool for this session\n"
    assert result.stdout.count(menu + "Type a number to answer.\n") == 3
    assert result.stdout.endswith("permission:allow_once\n")
    assert permission_answers(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    assert prompts(fake_agent) == ["SCN_PERMISSION"]  # neither line became a prompt


# ---- restart and resume ------------------------------------------------------------------------
def test_a_restart_resumes_the_session_with_load_without_notice_or_replayed_history(
    chat, fake_agent
):
    first = chat(fake_agent, ["first message"])
    assert first.returncode == 0, first.stderr
    second = chat(fake_agent, ["second message"])
    assert second.returncode == 0, second.stderr
    assert second.stdout == "Echo: second message\n"  # no notice, nothing of the first turn
    assert len(fake_agent.frames_in("session/new")) == 1
    (load,) = fake_agent.frames_in("session/load")
    session_id = load["params"]["sessionId"]
    assert [f["params"]["sessionId"] for f in fake_agent.frames_in("session/prompt")] == [
        session_id,
        session_id,
    ]
    assert fake_agent.spawns() == 2


def test_an_agent_without_load_gets_a_new_session_and_a_one_line_notice(chat, fake_agent):
    first = chat(fake_agent, ["first message"], agent_opts=("--no-load",))
    assert first.returncode == 0, first.stderr
    second = chat(fake_agent, ["second message"], agent_opts=("--no-load",))
    assert second.returncode == 0, second.stderr
    notice, reply = second.stdout.splitlines()
    assert NOT_RESTORED in notice
    assert reply == "Echo: second message"
    assert not fake_agent.frames_in("session/load")
    assert len(fake_agent.frames_in("session/new")) == 2


def test_kiro_session_active_in_another_process_falls_back_to_a_new_session(chat, fake_agent):
    first = chat(fake_agent, ["first message"])
    assert first.returncode == 0, first.stderr
    second = chat(fake_agent, ["second message"], agent_opts=("--load-error", LOAD_ERROR_ACTIVE))
    assert second.returncode == 0, second.stderr
    notice, reply = second.stdout.splitlines()
    assert NOT_RESTORED in notice and "new session" in notice
    assert reply == "Echo: second message"
    assert len(fake_agent.frames_in("session/load")) == 1
    assert len(fake_agent.frames_in("session/new")) == 2
    assert "Traceback" not in second.stderr


def test_a_changed_workspace_starts_a_new_session_with_the_notice(chat, fake_agent, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert chat(fake_agent, ["one"], "--cwd", str(tmp_path / "a")).returncode == 0
    second = chat(fake_agent, ["two"], "--cwd", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    assert NOT_RESTORED in second.stdout and "workspace changed" in second.stdout
    assert not fake_agent.frames_in("session/load")


def test_a_chat_killed_mid_turn_leaves_the_conversation_usable(cli_env, fake_agent, tmp_path):
    proc = subprocess.Popen(
        chat_argv(fake_agent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.stdin is not None
    proc.stdin.write("hello\nSCN_HANG\n")
    proc.stdin.flush()
    assert wait_until(lambda: len(fake_agent.frames_in("session/prompt")) == 2)
    proc.kill()
    proc.communicate(timeout=10)
    assert all_gone(fake_agent)  # the orphaned agent ends at stdin EOF
    result = subprocess.run(
        chat_argv(fake_agent),
        input="/status\nagain\n",
        capture_output=True,
        text=True,
        timeout=30,
        env=cli_env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Turn: idle" in result.stdout
    assert result.stdout.endswith("Echo: again\n")
    assert NOT_RESTORED not in result.stdout
    assert len(fake_agent.frames_in("session/load")) == 1


def test_a_dead_agent_is_respawned_on_the_next_message_and_resumes(chat, fake_agent):
    result = chat(fake_agent, ["SCN_DIE_AFTER", "still there?"])
    assert result.returncode == 0, result.stderr
    assert "about to die" in result.stdout
    assert "stopped unexpectedly" in result.stdout
    assert result.stdout.endswith("Echo: still there?\n")
    assert fake_agent.spawns() == 2
    assert len(fake_agent.frames_in("session/load")) == 1
    assert prompts(fake_agent) == ["SCN_DIE_AFTER", "still there?"]  # never resent


def test_status_after_a_restart_shows_the_model_the_conversation_is_bound_to(chat, fake_agent):
    opts = ("--models", "a,b")
    first = chat(fake_agent, ["hello", "/model b"], agent_opts=opts)
    assert "Model set to b." in first.stdout
    second = chat(fake_agent, ["/status"], agent_opts=opts)
    assert "Model: b\n" in second.stdout


# ---- error, refusal and timeout texts ----------------------------------------------------------
def test_a_terminal_error_is_shown_in_the_chat_with_its_wording(chat, fake_agent):
    malformed = {
        "code": -32603,
        "message": "Internal error",
        "data": "Improperly formed request. (request_id: abc12345)",
    }
    result = chat(fake_agent, [script({"error": malformed}), "next"])
    assert result.returncode == 0, result.stderr
    assert "malformed" in result.stdout and "/compact" in result.stdout
    assert result.stdout.count("abc12345") == 1
    assert result.stdout.endswith("Echo: next\n")
    assert len(fake_agent.frames_in("session/prompt")) == 2  # not retried


def test_a_transient_error_in_the_chat_tells_the_retries_it_went_through(chat, fake_agent):
    throttled = {"code": -32603, "message": "Internal error", "data": "ThrottlingException"}
    result = chat(fake_agent, [script({"error": throttled}), "next"])
    assert result.returncode == 0, result.stderr
    assert (
        "throttling requests (rate limit) and kept doing so through 3 automatic retries. Wait"
        in (result.stdout)
    )
    assert result.stdout.endswith("Echo: next\n")


def test_an_unknown_agent_error_in_the_chat_is_quoted_as_the_agents_words(chat, fake_agent):
    error = {"code": -32099, "message": "Sandbox refused to start"}
    result = chat(fake_agent, [script({"error": error})])
    assert result.returncode == 0, result.stderr
    assert 'The agent reported an error: "Sandbox refused to start". Send the message again' in (
        result.stdout
    )


def test_a_kiro_refusal_shows_the_card_without_repeating_the_explanation(chat, fake_agent):
    result = chat(fake_agent, ["SCN_REFUSAL_KIRO"])
    assert result.returncode == 0, result.stderr
    assert "The model declined to answer this request." in result.stdout
    assert "Category: CYBER" in result.stdout
    assert "claude-sonnet-4" in result.stdout
    assert result.stdout.count("compromise systems") == 1
    assert len(fake_agent.frames_in("session/prompt")) == 1


def test_a_timeout_shows_the_partial_output_and_the_conversation_is_not_left_busy(chat, fake_agent):
    result = chat(fake_agent, ["SCN_HANG", "/status", "next"], "--timeout", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("partial answer\n")
    assert "did not finish within 1 s" in out
    assert "Turn: idle" in out
    assert out.endswith("Echo: next\n")
    assert fake_agent.frames_in("session/cancel")


def test_a_timeout_on_an_agent_that_ignores_cancel_answers_promptly_and_respawns_it(
    cli_env, fake_agent, tmp_path
):
    proc = subprocess.Popen(
        [*chat_argv(fake_agent, "--timeout", "2", agent_opts=STUBBORN_OPTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=production_graces(cli_env),
        cwd=tmp_path,
    )
    assert proc.stdin is not None
    proc.stdin.write(f"{STUBBORN}\nnext\n".encode())
    proc.stdin.flush()
    assert wait_until(lambda: bool(fake_agent.frames_in("session/prompt")))
    (sent,) = [
        r for r in fake_agent.records() if r.get("frame", {}).get("method") == "session/prompt"
    ]
    shown = read_until(proc, "did not finish within 2 s")
    late = time.time() - sent["t"] - 2
    assert late < 3.5, f"the notice came {late:.1f} s after the timeout"
    assert shown.startswith("stuck")
    first = fake_agent.pids()
    assert len(first) == 2  # the hung agent and its forked child
    assert wait_until(lambda: not any(pid_alive(pid) for pid in first), timeout=5)
    out, err = _communicate_within(proc, fake_agent, 20)  # closes stdin: the end of input
    assert proc.returncode == 0, err
    assert (shown + out.decode()).endswith("Echo: next\n")
    assert fake_agent.spawns() == 2  # the next message got a fresh agent ...
    assert fake_agent.frames_in("session/load")  # ... which resumed the conversation
    assert all_gone(fake_agent)


def test_max_tokens_keeps_the_text_and_says_it_was_cut(chat, fake_agent):
    result = chat(fake_agent, ["SCN_MAX_TOKENS"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("This answer was cut")
    assert "output limit" in result.stdout


def test_prompt_busy_is_explained_without_naming_a_command(chat, fake_agent):
    result = chat(fake_agent, ["SCN_BUSY", "next"])
    assert result.returncode == 0, result.stderr
    busy = result.stdout.split("Echo: next")[0]
    assert "clears by itself" in busy
    assert "/" not in busy
    assert result.stdout.endswith("Echo: next\n")


def test_prompt_busy_resets_the_session_and_replays_the_message_once(chat, fake_agent):
    busy = {
        "error": {"code": -32603, "message": "Internal error", "data": "prompt already in progress"}
    }
    text = script({"attempts": [[busy], [busy], [busy], [{"chunk": "got through"}]]})
    result = chat(fake_agent, [text])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "got through\n"
    assert len(fake_agent.frames_in("session/prompt")) == 4


def test_an_auth_error_names_the_sign_in_step_in_the_chat(chat, fake_agent):
    result = chat(fake_agent, ["SCN_AUTH"])
    assert result.returncode == 0, result.stderr
    assert "kiro-cli login" in result.stdout


# ---- stopping ----------------------------------------------------------------------------------
def _start_chat(cli_env, agent: FakeAgent, tmp_path: Path, text: str, *agent_opts: str):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        chat_argv(agent, agent_opts=agent_opts),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")  # stdin stays open: the chat is live when the signal comes
    proc.stdin.flush()
    return proc


def _communicate_within(proc: subprocess.Popen, agent: FakeAgent, seconds: float):  # type: ignore[type-arg, no-untyped-def]
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=10)
        for pid in agent.pids():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"chat did not stop within {seconds:g} s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_turn_stops_chat_with_the_partial_output_and_no_agent_left(
    cli_env, fake_agent, tmp_path, sig
):
    proc = _start_chat(cli_env, fake_agent, tmp_path, "SCN_HANG", "--fork-child")
    assert wait_until(lambda: bool(fake_agent.frames_in("session/prompt")))
    assert wait_until(lambda: bool(chunks_sent(fake_agent)))
    time.sleep(0.2)  # let the chunk reach the chat
    proc.send_signal(sig)
    out, err = _communicate_within(proc, fake_agent, 10)
    assert proc.returncode == 0, err
    assert out.startswith("partial answer")
    assert "Traceback" not in err
    assert len(fake_agent.pids()) == 2  # the agent and its forked child
    assert all_gone(fake_agent)


def test_sigterm_while_an_approval_is_pending_answers_it_cancelled(cli_env, fake_agent, tmp_path):
    proc = _start_chat(cli_env, fake_agent, tmp_path, "SCN_PERMISSION")
    asked = lambda: any(  # noqa: E731
        r.get("dir") == "out" and r["frame"].get("method") == "session/request_permission"
        for r in fake_agent.records()
    )
    assert wait_until(asked)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = _communicate_within(proc, fake_agent, 10)
    assert proc.returncode == 0, err
    assert "Type a number to answer." in out
    assert permission_answers(fake_agent) == [{"outcome": "cancelled"}]
    assert all_gone(fake_agent)


def test_sigint_while_waiting_for_input_exits_zero(cli_env, fake_agent, tmp_path):
    proc = _start_chat(cli_env, fake_agent, tmp_path, "hello")
    printed = read_until(proc, "Echo: hello")
    proc.send_signal(signal.SIGINT)
    out, err = _communicate_within(proc, fake_agent, 10)
    assert proc.returncode == 0, err
    assert printed + out == "Echo: hello\n"
    assert all_gone(fake_agent)


def test_the_output_of_a_chat_stopped_by_a_signal_ends_with_a_newline(
    cli_env, fake_agent, tmp_path
):
    proc = _start_chat(cli_env, fake_agent, tmp_path, "SCN_HANG")
    assert wait_until(lambda: bool(chunks_sent(fake_agent)))
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = _communicate_within(proc, fake_agent, 10)
    assert out.startswith("partial answer")
    assert out.endswith("\n")


def test_sigterm_stops_chat_within_ten_seconds_even_with_a_stubborn_agent(
    cli_env, fake_agent, tmp_path
):
    env = {
        k: v
        for k, v in cli_env.items()
        if k not in ("SWITCHBOARD_CANCEL_GRACE", "SWITCHBOARD_SHUTDOWN_GRACE")
    }
    stubborn = script({"chunk": "stuck "}, {"ignore_cancel": True}, {"hang": True})
    proc = _start_chat(
        env, fake_agent, tmp_path, stubborn, "--ignore-sigterm", "--ignore-stdin-eof"
    )
    assert wait_until(lambda: bool(fake_agent.frames_in("session/prompt")))
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = _communicate_within(proc, fake_agent, 10)
    assert proc.returncode == 0, err
    assert out.startswith("stuck")
    assert all_gone(fake_agent)


# ---- run and doctor ----------------------------------------------------------------------------
def test_run_with_no_surface_configured_exits_2_and_names_the_settings(run_cli):
    result = run_cli("run")
    assert result.returncode == 2
    for setting in (
        "SWITCHBOARD_TELEGRAM__TOKEN",
        "SWITCHBOARD_SLACK__BOT_TOKEN",
        "SWITCHBOARD_DISCORD__TOKEN",
    ):
        assert setting in result.stderr
    assert "Traceback" not in result.stderr


def doctor(run_cli, agent_command: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    # run_cli's working directory is the workspace, where a state file is refused
    env = {"SWITCHBOARD_STATE": ":memory:", **(env or {})}
    return run_cli("doctor", "--agent", "kiro", "--agent-command", agent_command, env=env)


def test_doctor_with_a_working_agent_prints_ok_lines_and_exits_0(run_cli, fake_agent):
    result = doctor(run_cli, fake_agent.command())
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines and all(line.startswith("ok ") for line in lines)
    for what in ("agent found", "agent starts", "agent signed in", "state store"):
        assert any(what in line for line in lines), what
    assert not fake_agent.frames_in("session/prompt")
    assert all_gone(fake_agent)


def test_doctor_with_a_missing_agent_command_exits_1_naming_it(run_cli):
    result = doctor(run_cli, "no-such-agent-binary acp")
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "no-such-agent-binary" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_with_an_agent_that_is_not_signed_in_names_the_sign_in_step(run_cli, fake_agent):
    auth = json.dumps({"code": -32000, "message": "Authentication required"})
    result = doctor(run_cli, fake_agent.command("--new-error", auth))
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1
    assert "signed in" in failed[0] and "kiro-cli login" in failed[0]
    assert all_gone(fake_agent)


def test_doctor_with_a_state_path_under_a_regular_file_exits_1(run_cli, fake_agent, tmp_path):
    blocker = tmp_path.parent / f"{tmp_path.name}-not-a-dir"  # outside the workspace
    blocker.write_text("x")
    result = doctor(
        run_cli, fake_agent.command(), env={"SWITCHBOARD_STATE": str(blocker / "state.db")}
    )
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and "state store" in failed[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_names_a_malformed_surface_token_without_printing_it(run_cli, fake_agent):
    result = doctor(
        run_cli,
        fake_agent.command(),
        env={"SWITCHBOARD_TELEGRAM__TOKEN": "12:not-a-real-secret-value"},
    )
    assert result.returncode == 1
    assert "SWITCHBOARD_TELEGRAM__TOKEN" in result.stdout
    assert "not-a-real-secret-value" not in result.stdout + result.stderr


# ---- text that cannot be encoded ---------------------------------------------------------------
def test_stdin_with_invalid_utf8_and_nul_reaches_the_agent_valid_and_chat_goes_on(
    cli_env, fake_agent, tmp_path
):
    hostile_chunk = script({"chunk": "a\ud800b\x00c \x1b[31m😀 \U0010ffff"})
    proc = subprocess.run(
        chat_argv(fake_agent),
        input=b"hi \xff\x00there\n" + hostile_chunk.encode() + b"\nafter\n",
        capture_output=True,
        timeout=30,
        env=cli_env,
        cwd=tmp_path,
    )
    stdout = proc.stdout.decode("utf-8")  # strict: everything printed is valid UTF-8
    assert proc.returncode == 0, proc.stderr
    assert prompts(fake_agent) == ["hi \ufffdthere", hostile_chunk, "after"]
    assert "Echo: hi \ufffdthere" in stdout
    assert "a\ufffdbc [31m😀 \ufffd" in stdout
    assert "Echo: after" in stdout


# ---- the terminal --------------------------------------------------------------------------------
def test_with_piped_stdin_the_reply_is_written_as_it_streams(cli_env, fake_agent, tmp_path):
    slow = script({"chunk": "first part, "}, {"sleep": 2}, {"chunk": "second part"})
    proc = _start_chat(cli_env, fake_agent, tmp_path, slow)
    shown = read_until(proc, "first part,")
    assert not any("second part" in json.dumps(frame) for frame in chunks_sent(fake_agent))
    out, err = _communicate_within(proc, fake_agent, 15)
    assert proc.returncode == 0, err
    assert shown + out == "first part, second part\n"


class Terminal:
    """`switchboard chat` on a pseudo-terminal: what a person at a real terminal sees."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=cwd
        )
        os.close(slave)
        self.seen = ""

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def wait_for(self, text: str, timeout: float = 15) -> str:
        """Everything shown so far (newlines as "\\n"), once `text` is among it."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} not shown; got {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the chat exited and closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}; got {self.seen!r}"
                self.seen += chunk.decode().replace("\r\n", "\n")
        return self.seen

    def end(self, agent: FakeAgent) -> int:
        os.write(self.master, b"\x04")  # Ctrl-D: end of input
        _communicate_within(self.proc, agent, 15)
        os.close(self.master)
        return self.proc.returncode


@pytest.fixture
def terminal(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> Iterator[Callable[..., Terminal]]:
    started: list[Terminal] = []

    def start(agent: FakeAgent, *options: str, agent_opts: Sequence[str] = ()) -> Terminal:
        term = Terminal(chat_argv(agent, *options, agent_opts=agent_opts), cli_env, tmp_path)
        started.append(term)
        return term

    yield start
    for term in started:  # a failed test leaves nothing running
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait(10)
    for pid in fake_agent.pids():
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_terminal_shows_a_prompt_when_it_waits_for_input(terminal, fake_agent):
    term = terminal(fake_agent)
    assert term.wait_for("> ") == "> "
    term.type("hello")
    term.wait_for("Echo: hello\n> ")
    term.type("/status")
    shown = term.wait_for("Turn: idle\n> ")
    assert shown.startswith("> hello\nEcho: hello\n> /status\nAgent: kiro (")
    assert term.end(fake_agent) == 0
    assert all_gone(fake_agent)


def test_a_line_typed_while_a_reply_streams_is_shown_after_it_then_answered(terminal, fake_agent):
    slow = script({"chunk": "alpha "}, {"sleep": 1.5}, {"chunk": "omega"})
    term = terminal(fake_agent)
    term.wait_for("> ")
    term.type(slow)
    term.wait_for(slow + "\nalpha")  # the terminal's echo of the line, then the reply
    term.type("typed meanwhile")
    shown = term.wait_for("Echo: typed meanwhile\n> ")
    reply = shown.split(slow + "\n", 1)[1]
    assert reply == (
        "alpha omega\n"
        "> typed meanwhile\n"
        "Queued — the agent is still working.\n"
        "Echo: typed meanwhile\n"
        "> "
    )
    assert term.end(fake_agent) == 0


def test_stop_says_how_many_queued_messages_it_dropped(terminal, fake_agent):
    term = terminal(fake_agent)
    term.wait_for("> ")
    term.type("SCN_HANG")
    term.wait_for("SCN_HANG\npartial answer")
    term.type("one")
    term.type("two")
    term.type("/stop")
    shown = term.wait_for("queued messages were dropped.\n> ")
    assert "Stopping. 2 queued messages were dropped." in shown
    assert "The turn was stopped." in shown
    assert prompts(fake_agent) == ["SCN_HANG"]  # the dropped lines never reached the agent
    assert term.end(fake_agent) == 0


def test_interrupt_stops_the_reply_keeps_the_queue_and_goes_first(terminal, fake_agent):
    term = terminal(fake_agent)
    term.wait_for("> ")
    term.type("SCN_HANG")
    term.wait_for("SCN_HANG\npartial answer")
    term.type("queued first")
    term.type("/interrupt look here instead")
    shown = term.wait_for("Echo: queued first\n> ")
    assert "Stopping the current reply; this message goes to the agent next." in shown
    assert shown.index("Echo: look here instead") < shown.index("Echo: queued first")
    assert prompts(fake_agent) == ["SCN_HANG", "look here instead", "queued first"]
    assert term.end(fake_agent) == 0


def test_stop_ends_the_turn_of_an_agent_that_ignores_the_cancel_after_the_grace(
    terminal, fake_agent
):
    term = terminal(fake_agent, agent_opts=STUBBORN_OPTS)  # SWITCHBOARD_CANCEL_GRACE is 1 here
    term.wait_for("> ")
    term.type(STUBBORN)
    term.wait_for(STUBBORN + "\nstuck")
    first = fake_agent.pids()
    term.type("/stop")
    term.wait_for("The turn was stopped.\n")
    assert wait_until(lambda: not any(pid_alive(pid) for pid in first), timeout=5)
    term.type("again")
    term.wait_for("Echo: again\n> ")
    assert fake_agent.spawns() == 2
    assert term.end(fake_agent) == 0
    assert all_gone(fake_agent)


def test_doctor_names_an_agent_that_gives_no_agent_info_by_its_command(run_cli, fake_agent):
    anonymous = json.dumps({"agentInfo": None})
    result = doctor(run_cli, fake_agent.command("--init-result", anonymous))
    assert result.returncode == 0, result.stdout + result.stderr
    (starts,) = [line for line in result.stdout.splitlines() if "agent starts" in line]
    assert "initialize answered by python" in starts and "(no version given)" in starts
    assert "?" not in starts


# ---- files (/file) ----------------------------------------------------------------------------
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def test_chat_file_line_attaches_a_local_file_with_its_caption(chat, fake_agent, tmp_path):
    (tmp_path / "my shot.png").write_bytes(PNG)
    result = chat(
        fake_agent,
        ['/file "my shot.png" what is it?', "/file missing.png", "/file", "after"],
        agent_opts=("--prompt-capabilities", '{"image": true}'),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Echo: what is it?\n\n[received: image image/png {len(PNG)}B]" in out
    assert "Cannot attach missing.png: no such file or directory." in out
    assert "Usage: /file PATH [caption]" in out
    assert "Echo: after" in out
    frames = fake_agent.frames_in("session/prompt")
    assert [[b["type"] for b in f["params"]["prompt"]] for f in frames] == [
        ["text", "image"],
        ["text"],
    ]
