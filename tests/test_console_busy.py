"""Control of a running turn from the terminal (issue 24): the real `switchboard chat` with the
scripted fake agent as a real subprocess, piped (a script) and on a pseudo-terminal (a person).

Piped, a plain line still waits for the reply before it; `/steer`, `/interrupt` and `/stop` go
once the reply has begun, and the line after one waits for what it started. On a terminal every
line goes at once: a line typed mid-reply is shown in the reply with the queue's acknowledgement,
which says what to type instead of pressing buttons; `/busy` chooses what a plain one does."""

# ruff: noqa: F811  (the tests take the `chat` and `terminal` fixtures imported below)
from __future__ import annotations

import pytest

from surfaces.console.convert import acts_on_reply, new_text
from tests.conftest import FakeAgent, script
from tests.test_chat_cli import chat, prompts, terminal  # noqa: F401  (`chat`, `terminal`: fixtures)

STEERING = ("--steering",)
# A reply that says something, then waits up to 20 s for a message steered into it. The fake
# agent may go on before it answers the steering request; the pause lets that answer arrive
# before the turn ends, as a real agent's does, so the quote is in the reply's final text.
AWAITS_STEER = script(
    {"chunk": "working on it"}, {"await_steer": 20}, {"sleep": 1}, {"chunk": " done"}
)
HINT = "/steer TEXT adds TEXT to the running reply; /interrupt TEXT stops the reply"


def steered(agent: FakeAgent) -> list[str]:
    """The outcome of every `_session/steering` request the agent answered."""
    return [r["outcome"] for r in agent.records() if r.get("event") == "steer"]


# ---- piped stdin: a script ---------------------------------------------------------------------
def test_piped_steer_goes_into_the_running_reply_and_the_next_line_waits_for_it(chat, fake_agent):
    lines = [AWAITS_STEER, "/steer use the other file", "after"]
    result = chat(fake_agent, lines, agent_opts=STEERING)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "steered:use the other file" in out
    assert "> **you:** use the other file" in out  # the person's line, quoted in the reply
    assert out.index("steered:use the other file") < out.index(" done") < out.index("Echo: after")
    assert steered(fake_agent) == ["injected"]
    assert prompts(fake_agent) == [AWAITS_STEER, "after"]  # steered, not a prompt of its own
    assert "Queued" not in out  # "after" waited for the reply: nothing was queued


def test_piped_interrupt_stops_the_reply_sends_its_text_next_and_the_next_line_waits(
    chat, fake_agent
):
    result = chat(fake_agent, ["SCN_HANG", "/interrupt look here instead", "third"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("partial answer")
    assert "Stopping the current reply; this message goes to the agent next." in out
    assert out.index("Echo: look here instead") < out.index("Echo: third")
    assert prompts(fake_agent) == ["SCN_HANG", "look here instead", "third"]
    assert "Queued" not in out  # "third" waited for the interrupting message's reply


def test_piped_stop_mid_reply_stops_it_and_the_script_goes_on(chat, fake_agent):
    result = chat(fake_agent, ["SCN_HANG", "/stop", "after"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("partial answer")
    assert "The turn was stopped." in out
    assert out.endswith("Echo: after\n")
    assert prompts(fake_agent) == ["SCN_HANG", "after"]
    assert len(fake_agent.frames_in("session/cancel")) == 1


def test_piped_plain_line_still_waits_for_the_reply_even_with_steering(chat, fake_agent):
    slow = script({"chunk": "alpha "}, {"sleep": 1}, {"chunk": "omega"})
    result = chat(fake_agent, ["/steer first", slow, "plain"], agent_opts=STEERING)
    assert result.returncode == 0, result.stderr
    # the scripted-chat promise: each reply whole and in order, nothing queued
    assert result.stdout == "Echo: first\nalpha omega\nEcho: plain\n"
    # with no reply running, /steer TEXT is an ordinary prompt; the agent was never asked to steer
    assert prompts(fake_agent) == ["first", slow, "plain"]
    assert steered(fake_agent) == []


# ---- on a terminal: a person -------------------------------------------------------------------
def test_a_line_typed_mid_reply_is_acknowledged_at_once_then_steer_acts_on_the_reply(
    terminal, fake_agent
):
    term = terminal(fake_agent, agent_opts=STEERING)
    term.wait_for("> ")
    term.type(AWAITS_STEER)
    term.wait_for(AWAITS_STEER + "\nworking on it")  # the line's echo, then the reply
    term.type("and the tests")
    # shown while the reply still runs (it waits for a steer), with what to type instead
    shown = term.wait_for(HINT)
    assert "> and the tests\nQueued — the agent is still working. " + HINT in shown
    term.type("/steer use the other file")
    shown = term.wait_for("Echo: and the tests\n> ").split(AWAITS_STEER + "\n", 1)[1]
    # the typed lines and the acknowledgement in the reply, on lines of their own
    assert shown.startswith(
        "working on it\n"
        "> and the tests\n"
        f"Queued — the agent is still working. {HINT} and sends TEXT next.\n"
        "> /steer use the other file\n"
    )
    # the quote where the reply had got to (the agent's answer to it may stream in first)
    assert "\n> **you:** use the other file\n" in shown
    assert "steered:use the other file" in shown
    assert shown.endswith(" done\nEcho: and the tests\n> ")
    assert prompts(fake_agent) == [AWAITS_STEER, "and the tests"]
    assert term.end(fake_agent) == 0


def test_busy_steer_injects_a_plain_line_typed_mid_reply(terminal, fake_agent):
    term = terminal(fake_agent, agent_opts=STEERING)
    term.wait_for("> ")
    term.type("/busy steer")
    term.wait_for("goes into its running reply.\n> ")
    term.type(AWAITS_STEER)
    term.wait_for(AWAITS_STEER + "\nworking on it")  # the line's echo, then the reply
    term.type("use the other file")
    shown = term.wait_for(" done\n")
    assert "steered:use the other file" in shown
    assert "Queued" not in shown
    assert prompts(fake_agent) == [AWAITS_STEER]
    assert steered(fake_agent) == ["injected"]
    assert term.end(fake_agent) == 0


def test_busy_interrupt_setting_stops_the_reply_for_a_plain_line(terminal, fake_agent, cli_env):
    cli_env["SWITCHBOARD_BUSY_MODE"] = "interrupt"
    term = terminal(fake_agent)
    term.wait_for("> ")
    term.type("SCN_HANG")
    term.wait_for("SCN_HANG\npartial answer")
    term.type("look here instead")
    shown = term.wait_for("Echo: look here instead\n> ")
    assert "Stopping the current reply; this message goes to the agent next." in shown
    assert prompts(fake_agent) == ["SCN_HANG", "look here instead"]
    assert term.end(fake_agent) == 0


def test_without_steering_the_acknowledgement_offers_only_interrupt(terminal, fake_agent):
    term = terminal(fake_agent)
    term.wait_for("> ")
    term.type("SCN_HANG")
    term.wait_for("SCN_HANG\npartial answer")
    term.type("later")
    shown = term.wait_for("sends TEXT next.\n")
    assert "Queued — the agent is still working. /interrupt TEXT stops the reply" in shown
    assert "/steer" not in shown
    term.type("/stop")
    term.wait_for("The turn was stopped.\n")
    assert term.end(fake_agent) == 0


# ---- the pure parts ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "acts"),
    [("/steer x", True), ("/STOP", True), ("  /interrupt y", True), ("//stop", False),
     ("/status", False), ("stop", False), ("", False)],
)  # fmt: skip
def test_the_commands_that_act_on_the_running_reply(line: str, acts: bool) -> None:
    assert acts_on_reply(line) is acts


@pytest.mark.parametrize(
    ("shown", "answer", "written"),
    [
        ("abc", "abcdef", "def"),
        ("abcdef", "abc", ""),
        # a quote put where it was sent, after which the answer had streamed on
        ("workingsteered:x", "working\n\n> **you:** x\n\nsteered:x more", "\n> **you:** x\n more"),
        ("abc", "xyz", "\nxyz"),
    ],
)
def test_what_the_terminal_writes_for_a_changed_reply(
    shown: str, answer: str, written: str
) -> None:
    assert new_text(shown, answer) == written


def test_piped_steer_while_the_agent_asks_leaves_the_question_to_the_next_line(chat, fake_agent):
    name = {
        "request": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        }
    }
    asks = script(name, {"await_steer": 20}, {"sleep": 1}, {"chunk": " done"})
    result = chat(fake_agent, [asks, "/steer hurry", "Ann"], agent_opts=STEERING)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Your name?" in out
    assert "steered:hurry" in out
    assert out.index("steered:hurry") < out.index(" done")
    answers = [
        r["frame"]["result"]
        for r in fake_agent.records()
        if r.get("dir") == "in"
        and "result" in r.get("frame", {})
        and "action" in r["frame"]["result"]
    ]
    assert answers == [{"action": "accept", "content": {"name": "Ann"}}]
    assert prompts(fake_agent) == [asks]  # neither the steer nor the answer was a prompt
