"""The gate on what passes through us, as a person meets it (issue 22, points 1 and 2): through
`switchboard chat` (stdin answers the menu) and through Telegram (the real python-telegram-bot
against the fake Bot API). The agent is the scripted fake agent, a real subprocess; a command it
runs through `terminal/create` leaves a marker file, so "it ran" is what the disk says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving
from tests.test_telegram import ALICE, api, settings_for, shows  # noqa: F401

KINDLESS = {"update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Shell"}}


def _unasked_terminal(marker: str) -> str:
    create = {"command": "sh", "args": ["-c", f"touch {marker}"]}
    waited = {"terminalId": "$t.terminalId"}
    return script(
        KINDLESS,
        {"request": {"method": "terminal/create", "params": create}, "save": "t"},
        {"request": {"method": "terminal/wait_for_exit", "params": waited}},
        {"chunk": "done"},
    )


def _kindless_running() -> str:
    running = {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"}
    return script(KINDLESS, {"update": running}, {"chunk": "too late"})


def _cli(
    cli_env: dict[str, str], cwd: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env,
        cwd=cwd,
    )


def _chat(cli_env: dict[str, str], fake_agent: FakeAgent, cwd: Path, *lines: str) -> Any:
    command = fake_agent.command()
    stdin = "".join(line + "\n" for line in lines)
    return _cli(cli_env, cwd, "chat", "--agent", "kiro", "--agent-command", command, stdin=stdin)


def _agent_errors(fake_agent: FakeAgent) -> list[str]:
    """The error messages Switchboard answered the agent's requests with."""
    return [
        frame["error"]["message"]
        for frame in fake_agent.frames_in()
        if "method" not in frame and isinstance(frame.get("error"), dict)
    ]


# ---- switchboard chat ------------------------------------------------------------------------
@pytest.mark.parametrize(("typed", "runs"), [("1", True), ("2", False)], ids=["allow", "decline"])
def test_chat_asks_before_an_unasked_terminal_and_runs_it_only_when_allowed(
    cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path, typed: str, runs: bool
) -> None:
    workspace = tmp_path  # chat's workspace: where it runs
    result = _chat(cli_env, fake_agent, tmp_path, _unasked_terminal("ran.txt"), typed)
    assert result.returncode == 0, result.stderr
    assert "Run a command the agent did not ask about" in result.stdout
    assert "sh -c touch ran.txt" in result.stdout
    assert "  1) Allow\n  2) Decline\n" in result.stdout
    assert (workspace / "ran.txt").exists() is runs
    declined = "terminal/create refused: the person declined it"
    assert (declined in _agent_errors(fake_agent)) is not runs
    assert "done\n" in result.stdout


def test_chat_ends_a_turn_whose_kindless_tool_runs_unasked_and_audits_it(
    cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    result = _chat(cli_env, fake_agent, tmp_path, _kindless_running())
    assert result.returncode == 0, result.stderr
    assert "ran a tool (Shell) without asking for approval" in result.stdout
    assert "too late" not in result.stdout
    assert fake_agent.frames_in("session/cancel")
    audit = _cli(cli_env, tmp_path, "audit", "--since", "1h")
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    (violation,) = [r for r in records if r["action"] == "gate violation"]
    assert violation["tool"] == "Shell" and "fake-agent" in violation["agent"]


# ---- Telegram ---------------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_shows_switchboards_own_card_and_runs_nothing_until_allowed(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    marker = tmp_path / "ran.txt"
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, _unasked_terminal("ran.txt"))

        def card() -> Any:
            return next((m for m in api.chat_messages(ALICE.id) if m.reply_markup), None)

        await wait_for(card, "Switchboard's approval card", 15)
        message = card()
        assert "did not ask" in message.text and "sh -c touch ran.txt" in message.text
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert [b["text"] for b in buttons] == ["Allow", "Decline"]
        assert not marker.exists()  # nothing runs while the card waits
        api.press(ALICE, message, buttons[0]["callback_data"])
        await wait_for(shows(api, ALICE.id, "done"), "the turn to go on", 15)
    assert marker.exists()
    assert message.text.endswith("Answered: Allow")


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_tells_the_chat_when_a_tool_ran_unasked(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, _kindless_running())
        sentence = "ran a tool (Shell) without asking for approval"
        await wait_for(shows(api, ALICE.id, sentence), "the violation sentence", 15)
    assert "too late" not in api.chat_text(ALICE.id)
    assert fake_agent.frames_in("session/cancel")


def test_after_a_violation_the_next_message_loads_the_session_into_its_asking_mode(
    cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    described = {"accept-edits": "Edits files without asking", "ask": "Asks before every tool"}
    command = fake_agent.command(
        "--modes",
        ",".join(described),
        "--mode-descriptions",
        json.dumps(described),
        dialect="generic",
    )
    lines = "".join(f"{line}\n" for line in (_kindless_running(), "hello"))
    argv = ("chat", "--agent", "generic", "--agent-command", command)
    result = _cli(cli_env, tmp_path, *argv, stdin=lines)
    assert result.returncode == 0, result.stderr
    assert "without asking for approval" in result.stdout and "Echo: hello" in result.stdout
    assert len(fake_agent.frames_in("session/load")) == 1
    switches = [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")]
    # set after session/new; the load's answer says `ask`, which the gate takes as confirmed
    assert switches == ["ask"]
    loaded = fake_agent.frames_in("session/load")[0]
    prompts = fake_agent.frames_in("session/prompt")
    assert fake_agent.frames_in().index(loaded) < fake_agent.frames_in().index(prompts[-1])


def test_chat_shows_the_diff_of_an_unasked_write_and_keeps_the_file_when_declined(
    cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\n")
    params = {"path": str(notes), "content": "one\n2\n"}
    write = script({"request": {"method": "fs/write_text_file", "params": params}})
    result = _chat(cli_env, fake_agent, tmp_path, write, "2")
    assert result.returncode == 0, result.stderr
    assert "Write a file the agent did not ask about (edit)" in result.stdout
    assert "notes.txt: +1 \u22121" in result.stdout
    assert "\n-two\n" in result.stdout and "\n+2\n" in result.stdout
    assert notes.read_text() == "one\ntwo\n"
    assert "fs/write_text_file refused: the person declined it" in _agent_errors(fake_agent)
