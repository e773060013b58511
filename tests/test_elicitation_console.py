"""The agent's questions in the terminal: the real `switchboard chat` (stdin not a terminal) and
`switchboard ask`, with the scripted fake agent as a real subprocess sending `elicitation/create`.
A choice is the numbered menu, a typed field the input prompt; `ask` has nobody to answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import FakeAgent, script

SIZE_AND_NAME = {
    "request": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Order a shirt",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "size": {"type": "string", "title": "Size", "enum": ["S", "L"]},
                    "name": {"type": "string", "title": "Name on it", "maxLength": 10},
                },
                "required": ["size", "name"],
            },
        },
    }
}


def chat(
    cli_env: dict[str, str], tmp_path: Path, agent: FakeAgent, lines: list[str]
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bot", "chat", "--agent-command", agent.command()]
    return subprocess.run(
        argv,
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env,
        cwd=tmp_path,
    )


def elicitation_answers(agent: FakeAgent) -> list[dict[str, Any]]:
    """What we answered the agent's `elicitation/create` requests, in order."""
    asked = {
        r["frame"]["id"]
        for r in agent.records()
        if r.get("dir") == "out" and r.get("frame", {}).get("method") == "elicitation/create"
    }
    return [
        r["frame"]["result"]
        for r in agent.records()
        if r.get("dir") == "in"
        and "method" not in r.get("frame", {})
        and r["frame"].get("id") in asked
        and "result" in r["frame"]
    ]


def prompts(agent: FakeAgent) -> list[str]:
    return [f["params"]["prompt"][0]["text"] for f in agent.frames_in("session/prompt")]


def test_a_form_is_a_numbered_menu_then_the_input_prompt_and_a_bad_value_is_asked_again(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    form = script(SIZE_AND_NAME)
    result = chat(cli_env, tmp_path, fake_agent, [form, "2", "far too long a name", "Ann"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "The agent asks you:\nOrder a shirt\nQuestion 1 of 2: Size\n" in out
    assert "  1) S\n  2) L\n  3) Decline\n  4) Cancel\n" in out
    assert "Question 2 of 2: Name on it" in out
    assert '"decline" to refuse' in out  # typed words: no buttons beside the prompt
    assert "Name on it" in out.split("Question 2 of 2")[1].split("Reply again.")[0]
    assert elicitation_answers(fake_agent) == [
        {"action": "accept", "content": {"size": "L", "name": "Ann"}}
    ]
    assert prompts(fake_agent) == [form]  # the answers were not prompts
    assert "Answered by you: L" in out


def test_a_typed_decline_declines_and_the_end_of_input_declines_an_open_menu(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    form = script(SIZE_AND_NAME, SIZE_AND_NAME)
    result = chat(cli_env, tmp_path, fake_agent, [form, "1", "decline"])
    assert result.returncode == 0, result.stderr
    answers = elicitation_answers(fake_agent)
    assert answers == [{"action": "decline"}, {"action": "decline"}]
    assert "Answered by you: S" in result.stdout


def test_a_typed_field_nobody_answers_in_time_is_cancelled_and_said(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    name_only = {
        "request": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        }
    }
    env = {**cli_env, "SWITCHBOARD_APPROVAL_TIMEOUT": "0.5"}
    result = chat(env, tmp_path, fake_agent, [script(name_only)])
    assert result.returncode == 0, result.stderr
    assert elicitation_answers(fake_agent) == [{"action": "cancel"}]
    assert "No answer within 0.5 s: cancelled." in result.stdout


def test_ask_cannot_answer_a_question_so_it_is_cancelled_and_said(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    argv = [sys.executable, "-m", "bot", "ask", "--agent-command", fake_agent.command()]
    result = subprocess.run(
        [*argv, script(SIZE_AND_NAME)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert elicitation_answers(fake_agent) == [{"action": "cancel"}]
    assert "cannot answer" in result.stderr and "Order a shirt" in result.stderr
    reply = json.loads(result.stdout.split("reply:", 1)[1])
    assert reply == {"result": {"action": "cancel"}}


ASK_COLOUR = {  # claude-agent-acp's AskUserQuestion: a pick, then an optional "Other" box
    "request": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Which colour?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "question_0": {"type": "string", "title": "Colour", "enum": ["Blue", "Red"]},
                    "question_0_custom": {"type": "string", "title": "Other"},
                },
            },
        },
    }
}


def test_a_choice_and_its_other_box_are_one_menu_with_other_as_an_entry(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    two = script(ASK_COLOUR, ASK_COLOUR)
    result = chat(cli_env, tmp_path, fake_agent, [two, "2", "3", "Green stripes"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "  1) Blue\n  2) Red\n  3) Other…\n  4) Skip\n  5) Decline\n  6) Cancel\n" in out
    assert "Question" not in out  # one question: the Other box is not counted
    assert elicitation_answers(fake_agent) == [
        {"action": "accept", "content": {"question_0": "Red"}},  # one choice, nothing more
        {"action": "accept", "content": {"question_0_custom": "Green stripes"}},
    ]
