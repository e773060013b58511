"""`switchboard ask` end to end: the real CLI, a real fake-agent subprocess, every outcome."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import STUBBORN, STUBBORN_OPTS, FakeAgent, pid_alive, production_graces, script


def ask(run_cli, agent: FakeAgent, text: str, *options: str, agent_opts=(), dialect="kiro"):  # type: ignore[no-untyped-def]
    return run_cli(
        "ask",
        "--agent",
        dialect,
        "--agent-command",
        agent.command(*agent_opts, dialect=dialect),
        *options,
        text,
    )


def test_a_streamed_reply_goes_to_stdout_and_exits_zero(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_STREAM")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello, world\n"
    assert result.stderr == ""


def test_the_agent_is_asked_with_cwd_and_mcp_servers_in_a_fresh_session(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "hi")
    assert result.returncode == 0, result.stderr
    (new,) = fake_agent.frames_in("session/new")
    assert os.path.isabs(new["params"]["cwd"])
    assert new["params"]["mcpServers"] == []
    (init,) = fake_agent.frames_in("initialize")
    assert init["params"]["protocolVersion"] == "2025-08-22"


def test_claude_and_codex_handshakes_send_integer_protocol_version(run_cli, fake_agent):
    for dialect, mode in (("claude", "default"), ("codex", "read-only")):
        modes = f"auto,{mode}"
        result = ask(run_cli, fake_agent, "hi", agent_opts=("--modes", modes), dialect=dialect)
        assert result.returncode == 0, result.stderr
    inits = fake_agent.frames_in("initialize")
    assert [f["params"]["protocolVersion"] for f in inits] == [1, 1]
    set_modes = [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")]
    assert set_modes == ["default", "read-only"]


def test_a_missing_agent_command_is_named_with_how_to_configure_another(run_cli):
    result = run_cli("ask", "--agent-command", "no-such-agent-binary acp", "hi")
    assert result.returncode == 1
    assert "no-such-agent-binary" in result.stderr
    assert "--agent-command" in result.stderr and "SWITCHBOARD_AGENT_COMMAND" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_garbage_lines_and_scalars_on_stdout_do_not_break_the_session(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_GARBAGE")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "survived"


def test_a_twelve_megabyte_line_is_read_without_killing_the_session(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_HUGE")
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("after huge\n")
    assert len(result.stdout) > 10_000_000


def test_requests_we_do_not_implement_get_method_not_found(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_UNKNOWN_REQUEST")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count('"code":-32601') == 2


def test_a_transient_error_is_retried_and_the_retry_answers(run_cli, fake_agent):
    throttled = {
        "error": {
            "code": -32603,
            "message": "Internal error",
            "data": "ThrottlingException: Rate exceeded",
        }
    }
    text = script({"attempts": [[throttled], [throttled], [{"chunk": "made it"}]]})
    result = ask(run_cli, fake_agent, text)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "made it\n"
    assert len(fake_agent.frames_in("session/prompt")) == 3
    assert fake_agent.spawns() == 1


def test_transient_errors_give_up_after_three_retries_with_one_sentence(run_cli, fake_agent):
    overloaded = {
        "code": -32603,
        "message": "Internal error",
        "data": "ServiceUnavailableException: Service unavailable",
    }
    result = ask(run_cli, fake_agent, script({"error": overloaded}))
    assert result.returncode == 1
    assert len(fake_agent.frames_in("session/prompt")) == 4
    assert "temporary server error" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_terminal_error_is_not_retried(run_cli, fake_agent):
    malformed = {
        "code": -32603,
        "message": "Internal error",
        "data": "Improperly formed request. (request_id: abc12345)",
    }
    result = ask(run_cli, fake_agent, script({"error": malformed}))
    assert result.returncode == 1
    assert len(fake_agent.frames_in("session/prompt")) == 1
    assert "malformed" in result.stderr and "/compact" in result.stderr
    assert "/new" not in result.stderr
    assert result.stderr.count("abc12345") == 1


def test_after_streamed_output_a_transient_error_gets_one_continuation_not_a_resend(
    run_cli, fake_agent
):
    throttled = {
        "error": {"code": -32603, "message": "Internal error", "data": "ThrottlingException"}
    }
    text = script({"chunk": "first half "}, throttled)
    result = ask(run_cli, fake_agent, text)
    prompts = [f["params"]["prompt"][0]["text"] for f in fake_agent.frames_in("session/prompt")]
    assert prompts[0] == text
    assert len(prompts) == 2 and "Continue" in prompts[1]
    assert result.stdout.startswith("first half")


def test_an_agent_that_dies_before_answering_is_respawned_and_retried(run_cli, fake_agent):
    text = script({"attempts": [[{"exit": 1}], [{"chunk": "second life"}]]})
    result = ask(run_cli, fake_agent, text)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "second life\n"
    assert fake_agent.spawns() == 2


def test_an_agent_that_keeps_dying_uses_the_reconnect_budget_then_says_so(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_DIE_BEFORE")
    assert result.returncode == 1
    assert fake_agent.spawns() == 4
    assert "stopped unexpectedly" in result.stderr


def test_an_agent_that_dies_after_output_is_not_sent_the_prompt_again(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_DIE_AFTER")
    assert result.returncode == 1
    assert fake_agent.spawns() == 1
    assert len(fake_agent.frames_in("session/prompt")) == 1
    assert "not sent again" in result.stderr


def test_a_timeout_cancels_and_keeps_the_partial_output(run_cli, fake_agent):
    started = time.monotonic()
    result = ask(run_cli, fake_agent, "SCN_HANG", "--timeout", "1")
    assert result.returncode == 1
    assert result.stdout == "partial answer\n"
    assert "did not finish within 1 s" in result.stderr
    assert fake_agent.frames_in("session/cancel")
    assert time.monotonic() - started < 15
    assert not any(pid_alive(pid) for pid in fake_agent.pids())


def test_a_timeout_on_an_agent_that_ignores_cancel_still_returns(run_cli, fake_agent):
    text = script({"chunk": "stuck "}, {"ignore_cancel": True}, {"hang": True})
    result = ask(run_cli, fake_agent, text, "--timeout", "1")
    assert result.returncode == 1
    assert result.stdout == "stuck \n"
    assert "did not finish" in result.stderr
    assert not any(pid_alive(pid) for pid in fake_agent.pids())


def test_a_timeout_on_an_agent_that_ignores_cancel_eof_and_sigterm_exits_promptly(
    cli_env, fake_agent, tmp_path
):
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "ask",
            "--agent-command",
            fake_agent.command(*STUBBORN_OPTS),
            "--timeout",
            "2",
            STUBBORN,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=production_graces(cli_env),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert proc.stdout == "stuck \n"
    assert "did not finish within 2 s" in proc.stderr
    # Bounded well below the 10 s cancel grace a stubborn agent could otherwise hold it for,
    # with room for a loaded machine (the steps themselves take about 3 s after the timeout).
    assert elapsed < 2 + 7, f"ask took {elapsed:.1f} s"
    assert fake_agent.frames_in("session/cancel")
    assert len(fake_agent.pids()) == 2  # the agent and its forked child
    assert not any(pid_alive(pid) for pid in fake_agent.pids())


def test_a_permission_request_stops_the_turn_and_names_the_tool(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_PERMISSION")
    assert result.returncode == 1
    assert "approval" in result.stderr and "Run echo hi" in result.stderr
    # never approved silently: the only answer sent was `cancelled`, after a session/cancel
    answers = [
        r["frame"]
        for r in fake_agent.records()
        if r.get("dir") == "in" and "result" in r.get("frame", {})
    ]
    assert answers and all(a["result"]["outcome"] == {"outcome": "cancelled"} for a in answers)
    assert fake_agent.frames_in("session/cancel")


def test_a_kiro_refusal_shows_a_card_without_repeating_the_streamed_explanation(
    run_cli, fake_agent
):
    result = ask(run_cli, fake_agent, "SCN_REFUSAL_KIRO")
    assert result.returncode == 1
    assert "declined" in result.stderr
    assert "Category: CYBER" in result.stderr
    assert "claude-sonnet-4" in result.stderr
    assert "compromise systems" in result.stdout
    assert "compromise systems" not in result.stderr
    assert len(fake_agent.frames_in("session/prompt")) == 1


def test_a_bare_refusal_stop_reason_is_a_refusal_without_details(run_cli, fake_agent):
    result = ask(
        run_cli, fake_agent, "SCN_REFUSAL_BARE", dialect="claude", agent_opts=("--modes", "default")
    )
    assert result.returncode == 1
    assert "declined" in result.stderr and "rephrasing" in result.stderr
    assert len(fake_agent.frames_in("session/prompt")) == 1


def test_an_auth_error_names_the_sign_in_step_and_is_not_retried(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_AUTH")
    assert result.returncode == 1
    assert "kiro-cli login" in result.stderr
    assert len(fake_agent.frames_in("session/prompt")) == 1


def test_auth_failure_at_session_new_names_the_codex_sign_in(run_cli, fake_agent):
    auth = json.dumps({"code": -32000, "message": "Authentication required"})
    result = ask(run_cli, fake_agent, "hi", agent_opts=("--new-error", auth), dialect="codex")
    assert result.returncode == 1
    assert "codex login" in result.stderr and "OPENAI_API_KEY" in result.stderr
    assert fake_agent.spawns() == 1


def test_prompt_busy_retries_briefly_then_says_it_clears_by_itself(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_BUSY")
    assert result.returncode == 1
    assert len(fake_agent.frames_in("session/prompt")) == 3
    assert "clears by itself" in result.stderr
    assert "/" not in result.stderr


def test_max_tokens_keeps_the_text_and_says_it_was_cut(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "SCN_MAX_TOKENS")
    assert result.returncode == 0
    assert result.stdout.strip()
    assert "output limit" in result.stderr


def test_kiro_tool_interruption_ends_the_turn_at_once(run_cli, fake_agent):
    started = time.monotonic()
    result = ask(run_cli, fake_agent, "SCN_KIRO_INTERRUPT", "--timeout", "30")
    assert time.monotonic() - started < 10
    assert result.returncode == 0
    assert "interrupted" in result.stderr


def test_a_codex_system_error_is_classified_from_its_text_chunk(run_cli, fake_agent):
    result = ask(
        run_cli,
        fake_agent,
        "SCN_CODEX_SYSTEM_ERROR",
        dialect="codex",
        agent_opts=("--modes", "read-only"),
    )
    assert result.returncode == 1
    assert "could not reach its model service" in result.stderr
    assert "stream disconnected" not in result.stdout
    assert len(fake_agent.frames_in("session/prompt")) == 4  # transient: retried


def test_a_generic_agent_without_an_asking_mode_is_refused_before_any_prompt(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "hi", dialect="generic")
    assert result.returncode == 1
    assert "ALLOW_UNGATED_TOOLS" in result.stderr
    assert not fake_agent.frames_in("session/prompt")


def test_kiro_trusting_all_tools_is_refused_with_zero_spawns(run_cli, fake_agent):
    result = run_cli(
        "ask",
        "--agent",
        "kiro",
        "--agent-command",
        fake_agent.command() + " --trust-all-tools",
        "hi",
    )
    assert result.returncode == 1
    assert "--trust-all-tools" in result.stderr
    assert fake_agent.spawns() == 0


def test_opting_out_of_the_tool_gate_starts_with_a_warning(run_cli, fake_agent):
    result = run_cli(
        "ask",
        "--agent",
        "generic",
        "--agent-command",
        fake_agent.command(dialect="generic"),
        "hi",
        env={"SWITCHBOARD_ALLOW_UNGATED_TOOLS": "true"},
    )
    assert result.returncode == 0
    assert result.stdout == "Echo: hi\n"
    assert "tool approval is OFF" in result.stderr


def test_claude_without_the_gating_mode_is_refused(run_cli, fake_agent):
    result = ask(run_cli, fake_agent, "hi", agent_opts=("--modes", "auto,plan"), dialect="claude")
    assert result.returncode == 1
    assert "'default'" in result.stderr
    assert not fake_agent.frames_in("session/prompt")


def test_an_invalid_setting_is_named(run_cli):
    result = run_cli("ask", "hi", env={"SWITCHBOARD_PROMPT_TIMEOUT": "soon"})
    assert result.returncode == 1
    assert "SWITCHBOARD_PROMPT_TIMEOUT" in result.stderr


def test_platform_tokens_do_not_reach_the_agent(run_cli, fake_agent, tmp_path):
    dump = tmp_path / "env.json"
    wrapper = (
        f"{sys.executable} -c \"import json,os,sys; json.dump(dict(os.environ), open('{dump}','w'));"
        f' os.execv(sys.argv[1], sys.argv[1:])" '
    ) + fake_agent.command()
    result = run_cli(
        "ask",
        "--agent-command",
        wrapper,
        "hi",
        env={
            "SWITCHBOARD_TELEGRAM__TOKEN": "123456:secret",
            "SWITCHBOARD_SLACK__BOT_TOKEN": "xoxb-1",
            "SWITCHBOARD_SLACK__APP_TOKEN": "xapp-1",
            "KEEP_ME": "yes",
            "NOT_LISTED": "no",
            "SWITCHBOARD_AGENT_ENV": "KEEP_ME,SWITCHBOARD_SLACK__BOT_TOKEN",
        },
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(dump.read_text())
    assert seen["KEEP_ME"] == "yes" and "NOT_LISTED" not in seen
    assert not [name for name in seen if name.startswith("SWITCHBOARD_")]
    assert "SWITCHBOARD_TELEGRAM__TOKEN" not in seen and "SWITCHBOARD_SLACK__BOT_TOKEN" not in seen
    assert "SWITCHBOARD_SLACK__APP_TOKEN" not in seen


def test_interrupting_ask_exits_130_and_leaves_no_agent_process(cli_env, fake_agent, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            "ask",
            "--agent-command",
            fake_agent.command("--fork-child"),
            "SCN_HANG",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    shown = proc.stdout.read(len("partial answer"))  # the turn is under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert shown + out == "partial answer\n"
    assert "Traceback" not in err
    assert len(fake_agent.pids()) == 2
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in fake_agent.pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in fake_agent.pids())


def test_sigterm_to_ask_also_stops_the_agent_group(cli_env, fake_agent, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            "ask",
            "--agent-command",
            fake_agent.command("--fork-child", "--ignore-sigterm"),
            "SCN_HANG_SILENT",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 10
    while not fake_agent.frames_in("session/prompt") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "Traceback" not in err
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in fake_agent.pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in fake_agent.pids())


# ---- text that cannot be encoded ---------------------------------------------------------------
def test_an_argument_with_an_undecodable_byte_is_asked_as_valid_text(run_cli, fake_agent):
    # str -> argv bytes with surrogateescape: the child gets the raw byte 0xFF, as from a shell
    result = ask(run_cli, fake_agent, "hello \udcff wörld 😀")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: hello \ufffd wörld 😀\n"
    (prompt,) = fake_agent.frames_in("session/prompt")
    assert prompt["params"]["prompt"][0]["text"] == "hello \ufffd wörld 😀"


def test_an_agent_chunk_with_text_that_cannot_be_encoded_is_printed_valid(run_cli, fake_agent):
    hostile = "a\ud800b\x00c \x1b[31m😀 \U0010ffff"
    result = ask(run_cli, fake_agent, script({"chunk": hostile}))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "a\ufffdbc [31m😀 \ufffd\n"
    assert result.stderr == ""


# ---- files (--file) ---------------------------------------------------------------------------
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def test_ask_file_sends_an_image_block_to_an_agent_that_takes_images(run_cli, fake_agent, tmp_path):
    (tmp_path / "shot.png").write_bytes(PNG)
    result = ask(
        run_cli,
        fake_agent,
        "what is in it?",
        "--file",
        str(tmp_path / "shot.png"),
        agent_opts=("--prompt-capabilities", '{"image": true}'),
    )
    assert result.returncode == 0, result.stderr
    assert f"[received: image image/png {len(PNG)}B]" in result.stdout
    (frame,) = fake_agent.frames_in("session/prompt")
    assert [b["type"] for b in frame["params"]["prompt"]] == ["text", "image"]
    assert frame["params"]["prompt"][0]["text"] == "what is in it?"


def test_ask_file_without_text_saves_files_in_the_workspace_inbox(run_cli, fake_agent, tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.pdf").write_bytes(b"%PDF-1.4\n")
    result = ask(
        run_cli, fake_agent, "", "--file", "a.txt", "--file", "b.pdf", "--cwd", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert "Echo: I am sending you these files: a.txt, b.pdf." in result.stdout
    inbox = tmp_path / ".switchboard" / "inbox"
    assert sorted(p.name for p in inbox.glob("*/*")) == ["a.txt", "b.pdf"]


def test_ask_file_refuses_a_program_and_a_missing_path_in_one_sentence(
    run_cli, fake_agent, tmp_path
):
    (tmp_path / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 40)
    refused = ask(run_cli, fake_agent, "", "--file", "tool")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "tool was not sent to the agent: it is a program, and Switchboard never accepts programs."
    )
    assert fake_agent.frames_in("session/prompt") == []
    missing = ask(run_cli, fake_agent, "hi", "--file", "nope.png")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Cannot attach nope.png: no such file or directory."
    nothing = run_cli("ask")
    assert nothing.returncode == 2 and "Nothing to ask" in nothing.stderr


def test_files_in_the_agents_reply_are_one_line_each_in_ask(run_cli, fake_agent):
    def content(block):  # type: ignore[no-untyped-def]
        return {"update": {"sessionUpdate": "agent_message_chunk", "content": block}}

    prompt = script(
        {"chunk": "Here you go."},
        content(
            {"type": "resource_link", "uri": "file:///ws/out/report.pdf", "name": "report.pdf"}
        ),
        content({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
        content({"type": "image", "data": "%%% not base64", "mimeType": "image/png"}),
    )
    result = ask(run_cli, fake_agent, prompt)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "Here you go.\n[file report.pdf: file:///ws/out/report.pdf]\n"
        "[file image.png: 8 bytes, not shown]\n"
    )
