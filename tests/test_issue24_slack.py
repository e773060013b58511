"""Issue 24's controls on Slack end to end (the real slack_sdk / slack_bolt through our adapter
against the fake Slack API, BotApp in process, the scripted agent as a real subprocess): a
question's choices and Yes/No as Block Kit buttons, pressed; a URL question's link button (its
click acked and nothing more) and Done, the agent's `elicitation/complete` closing the card; the
approval card's **Trust this tool for this session**, after which the same command is answered
without a card; an edit's change on the card and, past `SWITCHBOARD_DIFF_FILE_AFTER` lines, the
whole patch uploaded as a `.diff` file in the thread; a cancellable subagent's own Stop on the
live reply, which sends `session/cancel` with the child's id while the turn goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import Message, button_press
from tests.test_diffs import NEW, OLD
from tests.test_elicitation_slack_discord import agent_answer
from tests.test_slack import ALICE, BOB, CHANNEL, SlackEnv, slack_bot
from tests.test_subagents import CANCELLABLE, CHILD, cancels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

TRUST = "Trust this tool for this session"

CHOICES = {
    "request": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Which database?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "db": {
                        "type": "string",
                        "title": "Database",
                        "oneOf": [
                            {"const": "pg", "title": "PostgreSQL"},
                            {"const": "lite", "title": "SQLite"},
                        ],
                    },
                    "migrate": {"type": "boolean", "title": "Migrate now"},
                },
                "required": ["db", "migrate"],
            },
        },
    }
}


def _with_button(env: SlackEnv, thread: str, label: str) -> Message | None:
    """The latest message in the thread offering a button labelled `label`."""
    found = [
        m
        for m in env.fake.in_thread(CHANNEL, thread)
        if any(b["text"]["text"] == label for b in m.buttons)
    ]
    return found[-1] if found else None


def _labels(message: Message) -> dict[str, str]:
    return {b["text"]["text"]: b.get("value", "") for b in message.buttons}


async def _press(env: SlackEnv, who: str, thread: str, label: str) -> Message:
    """`who` presses `label` on the message in the thread that offers it, once it shows."""
    await wait_for(lambda: _with_button(env, thread, label), f"the {label!r} button", 15)
    message = _with_button(env, thread, label)
    assert message is not None
    await env.press(button_press(CHANNEL, who, message, _labels(message)[label]))
    return message


def _outcomes(fake: FakeAgent) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


# ---- the agent's questions ----------------------------------------------------------------------
async def test_a_questions_choices_and_yes_no_are_slack_buttons_answered_by_the_requester(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, script(CHOICES))
        await wait_for(lambda: _with_button(env, thread, "SQLite"), "the first card", 15)
        first = _with_button(env, thread, "SQLite")
        assert first is not None
        assert "Question 1 of 2" in first.visible
        assert list(_labels(first)) == ["PostgreSQL", "SQLite", "Decline", "Cancel"]
        await env.press(button_press(CHANNEL, BOB, first, _labels(first)["SQLite"]))
        await wait_for(lambda: env.fake.ephemerals, "the notice to bob")
        assert _with_button(env, thread, "SQLite") is first, "the card stays for Alice"
        await env.press(button_press(CHANNEL, ALICE, first, _labels(first)["SQLite"]))
        await wait_for(lambda: not first.buttons, "the first card closed", 15)

        second = await _press(env, ALICE, thread, "Yes")
        assert "Question 2 of 2" in second.visible
        assert list(_labels(second)) == ["Yes", "No", "Decline", "Cancel"]
        text = await env.answered(CHANNEL, thread, "reply:")
        await wait_for(lambda: not second.buttons, "the second card closed", 15)
    (notice,) = env.fake.ephemerals
    assert notice.user == BOB and "Alice" in notice.text
    # A press carries the person's Slack handle, not the display name a message's profile has.
    assert first.visible.endswith("Answered by alice: SQLite")
    assert agent_answer(text) == {"action": "accept", "content": {"db": "lite", "migrate": True}}


async def test_a_url_question_is_a_slack_link_button_and_the_agents_complete_closes_the_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    url = "https://tracker.example/login"
    params = {"mode": "url", "message": "Sign in to the tracker", "url": url, "elicitationId": "e"}
    steps = script(
        {"request": {"method": "elicitation/create", "params": params}},
        {"notify": {"method": "elicitation/complete", "params": {"elicitationId": "e"}}},
    )
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, steps)
        await wait_for(lambda: _with_button(env, thread, "Done"), "the link card", 15)
        card = _with_button(env, thread, "Done")
        assert card is not None and "Open the link to tracker.example" in card.visible
        (link,) = [b for b in card.buttons if b["text"]["text"] == "Open tracker.example"]
        assert link["url"] == url
        # Slack tells the app of a link button's click too: acked, it answers nothing.
        await env.press(button_press(CHANNEL, ALICE, card, url=url))
        assert "reply:" not in env.fake.thread_text(CHANNEL, thread)
        await env.press(button_press(CHANNEL, ALICE, card, _labels(card)["Done"]))
        text = await env.answered(CHANNEL, thread, "reply:")
        await wait_for(lambda: "complete" in card.visible, "the card closed by the agent", 15)
    assert not card.buttons
    assert agent_answer(text)["action"] == "accept"
    assert env.fake.ephemerals == []


# ---- trust and diffs -----------------------------------------------------------------------------
def _tool(call: str, command: str) -> dict[str, Any]:
    return {"toolCallId": call, "title": f"Run {command}", "kind": "execute",
            "rawInput": {"command": command}}  # fmt: skip


async def test_trust_on_slack_answers_the_same_command_without_a_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    tools = (_tool("c1", "npm test"), _tool("c2", "npm test --watch"), _tool("c3", "npm ci"))
    steps = script(*({"permission": {"toolCall": tool}} for tool in tools), {"chunk": " all done"})
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, steps)
        first = await _press(env, ALICE, thread, TRUST)
        assert list(_labels(first)) == ["Yes", "Always", "No", TRUST]
        await wait_for(lambda: "npm ci" in str(_with_button(env, thread, "No")), "card 2", 15)
        second = await _press(env, ALICE, thread, "No")
        await env.answered(CHANNEL, thread, "all done")
    cards = [m for m in env.fake.in_thread(CHANNEL, thread) if "wants to use a tool" in m.visible]
    assert cards == [first, second]  # none for `npm test --watch`
    assert "npm ci" in second.visible and "--watch" not in second.visible
    assert "Trusted for this session: `npm test …` commands" in json.dumps(
        first.blocks, ensure_ascii=False
    )
    assert not first.buttons
    assert _outcomes(fake_agent) == ["allow_once", "allow_once", "reject_once"]


async def test_slack_card_shows_the_change_and_a_long_one_comes_as_a_diff_file_in_the_thread(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    change = {"type": "diff", "path": "/w/long.txt", "oldText": OLD, "newText": NEW}
    tool = {"toolCallId": "e1", "title": "Edit long.txt", "kind": "edit", "content": [change]}
    steps = script({"permission": {"toolCall": tool}}, {"chunk": "edited"})
    small = {"diff_file_after": 5}
    async with slack_bot(tmp_path, fake_agent, "socket", settings=small) as env:
        thread = await env.mention(ALICE, steps)
        await wait_for(lambda: _with_button(env, thread, "Yes"), "the approval card", 15)
        card = _with_button(env, thread, "Yes")
        assert card is not None
        await wait_for(lambda: env.fake.uploads, "the .diff upload", 15)
        await env.press(button_press(CHANNEL, ALICE, card, _labels(card)["Yes"]))
        await env.answered(CHANNEL, thread, "edited")
    shown = json.dumps(card.blocks, ensure_ascii=False) + card.visible
    assert "/w/long.txt: +51 \u22121" in shown
    assert "+line three" in shown and "added 49" not in shown
    (upload,) = env.fake.uploads
    assert (upload.channel, upload.thread_ts, upload.name) == (CHANNEL, thread, "long.txt.diff")
    patch = upload.data.decode()
    assert patch.startswith("--- a/w/long.txt\n+++ b/w/long.txt\n")
    assert "+added 49\n" in patch and "-line 3\n" in patch
    assert _outcomes(fake_agent) == ["allow_once"]


# ---- a subagent's Stop ---------------------------------------------------------------------------
async def test_a_subagents_stop_on_slack_cancels_the_child_and_the_turn_goes_on(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    label = "Stop Test investigator"
    steps = script(CANCELLABLE, {"permission": {}}, {"chunk": " parent went on"})
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, steps)
        await wait_for(lambda: _with_button(env, thread, label), "the subagent's Stop", 15)
        live = _with_button(env, thread, label)
        assert live is not None
        assert list(_labels(live)) == ["Stop", label]
        await env.press(button_press(CHANNEL, BOB, live, _labels(live)[label]))
        await wait_for(lambda: env.fake.ephemerals, "the notice to bob")
        assert cancels(fake_agent) == []
        await env.press(button_press(CHANNEL, ALICE, live, _labels(live)[label]))
        await wait_for(lambda: cancels(fake_agent) == [CHILD], "session/cancel for the child")
        await wait_for(lambda: _with_button(env, thread, label) is None, "the button gone", 15)
        await _press(env, ALICE, thread, "Yes")
        await env.answered(CHANNEL, thread, "parent went on")
    (notice,) = [e for e in env.fake.ephemerals if e.user == BOB]
    assert "Only Alice or an approver can stop this subagent." in notice.text
    assert cancels(fake_agent) == [CHILD]  # the parent's session was never cancelled
    assert "permission:allow_once" in env.fake.thread_text(CHANNEL, thread)
