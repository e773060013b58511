"""Issue 24's controls on Discord end to end (the real discord.py through our adapter against the
fake gateway and REST API, BotApp in process, the scripted agent as a real subprocess): a
question's choices and Yes/No as message components, pressed; a URL question's link button
(style 5, its click never reaching the bot) and Done, the agent's `elicitation/complete` closing
the card; the approval card's **Trust this tool for this session**, after which the same command
is answered without a card; an edit's change on the card and, past `SWITCHBOARD_DIFF_FILE_AFTER`
lines, the whole patch attached as a `.diff` file; a cancellable subagent's own Stop on the live
reply, which sends `session/cancel` with the child's id while the turn goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import Interaction, Message
from tests.test_diffs import NEW, OLD
from tests.test_discord import World, discord_bot, shown, world  # noqa: F401 (a fixture)
from tests.test_elicitation_slack_discord import agent_answer
from tests.test_issue24_slack import CHOICES, TRUST
from tests.test_subagents import CANCELLABLE, CHILD, cancels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

LINK_STYLE = 5


def _with_button(scene: World, channel: str, label: str) -> Message | None:
    """The latest bot message in `channel` offering a component labelled `label`."""
    found = [
        m
        for m in scene.fake.bot_messages(channel)
        if any(b.get("label") == label for b in m.buttons())
    ]
    return found[-1] if found else None


def _labels(message: Message) -> list[str]:
    return [b["label"] for b in message.buttons()]


def _press(scene: World, who: Any, message: Message, label: str) -> Interaction:
    (button,) = [b for b in message.buttons() if b["label"] == label]
    return scene.fake.press(who, message.id, button["custom_id"])


async def _shown(scene: World, channel: str, label: str) -> Message:
    await wait_for(lambda: _with_button(scene, channel, label), f"the {label!r} button", 15)
    message = _with_button(scene, channel, label)
    assert message is not None
    return message


def _outcomes(fake: FakeAgent) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


async def _thread_of_mention(scene: World, text: str) -> str:
    """Alice mentions the bot in #general with `text`; the thread it answers in."""
    scene.fake.post(scene.general, scene.alice, text, mention=True)
    await wait_for(scene.fake.threads, "the thread")
    return scene.fake.threads()[0].id


# ---- the agent's questions ----------------------------------------------------------------------
async def test_a_questions_choices_and_yes_no_are_discord_components_answered_by_the_requester(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake = world.fake
    async with discord_bot(tmp_path, fake_agent, world):
        thread = await _thread_of_mention(world, script(CHOICES))
        first = await _shown(world, thread, "SQLite")
        assert "Question 1 of 2" in first.content
        assert _labels(first) == ["PostgreSQL", "SQLite", "Decline", "Cancel"]
        refused = _press(world, world.bob, first, "SQLite")
        await wait_for(lambda: refused.followups, "bob's notice")
        notice = fake.messages[refused.followups[0]]
        assert notice.ephemeral and "Alice" in notice.content
        assert first.buttons(), "the card stays for Alice"
        taken = _press(world, world.alice, first, "SQLite")
        await wait_for(lambda: not first.buttons(), "the first card closed", 15)

        second = await _shown(world, thread, "Yes")
        assert "Question 2 of 2" in second.content
        assert _labels(second) == ["Yes", "No", "Decline", "Cancel"]
        _press(world, world.alice, second, "Yes")
        await wait_for(lambda: "reply:" in "\n".join(shown(fake, thread)), "the reply", 15)
        await wait_for(lambda: not second.buttons(), "the second card closed", 15)
    assert taken.callback == {"type": 6} and taken.followups == []
    assert first.content.endswith("Answered by Alice: SQLite")
    assert agent_answer("\n".join(shown(fake, thread))) == {
        "action": "accept",
        "content": {"db": "lite", "migrate": True},
    }


async def test_a_url_question_is_a_discord_link_button_and_the_agents_complete_closes_the_card(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    url = "https://tracker.example/login"
    params = {"mode": "url", "message": "Sign in to the tracker", "url": url, "elicitationId": "e"}
    steps = script(
        {"request": {"method": "elicitation/create", "params": params}},
        {"notify": {"method": "elicitation/complete", "params": {"elicitationId": "e"}}},
    )
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, steps)
        card = await _shown(world, dm, "Done")
        assert "Open the link to tracker.example" in card.content
        (link,) = [b for b in card.buttons() if b["label"] == "Open tracker.example"]
        assert link["style"] == LINK_STYLE and link["url"] == url and "custom_id" not in link
        assert "reply:" not in "\n".join(shown(fake, dm))
        _press(world, world.alice, card, "Done")
        await wait_for(lambda: "reply:" in "\n".join(shown(fake, dm)), "the reply", 15)
        await wait_for(lambda: "complete" in card.content, "the card closed by the agent", 15)
    assert not card.buttons()
    assert agent_answer("\n".join(shown(fake, dm)))["action"] == "accept"


# ---- trust and diffs -----------------------------------------------------------------------------
def _tool(call: str, command: str) -> dict[str, Any]:
    return {"toolCallId": call, "title": f"Run {command}", "kind": "execute",
            "rawInput": {"command": command}}  # fmt: skip


async def test_trust_on_discord_answers_the_same_command_without_a_card(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    tools = (_tool("c1", "npm test"), _tool("c2", "npm test --watch"), _tool("c3", "npm ci"))
    steps = script(*({"permission": {"toolCall": tool}} for tool in tools), {"chunk": " all done"})
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, steps)
        first = await _shown(world, dm, TRUST)
        assert _labels(first) == ["Yes", "Always", "No", TRUST]
        _press(world, world.alice, first, TRUST)
        await wait_for(lambda: "npm ci" in str(_with_button(world, dm, "No")), "card 2", 15)
        second = await _shown(world, dm, "No")
        _press(world, world.alice, second, "No")
        await wait_for(lambda: any("all done" in t for t in shown(fake, dm)), "the final", 15)
    cards = [m for m in fake.bot_messages(dm) if "wants to use a tool" in m.content]
    assert [m.id for m in cards] == [first.id, second.id]  # none for `npm test --watch`
    assert "npm ci" in second.content and "--watch" not in second.content
    # The outcome is plain text: its backticks escaped, so they show as themselves.
    assert "Trusted for this session: \\`npm test …\\` commands" in first.content
    assert not first.buttons()
    assert _outcomes(fake_agent) == ["allow_once", "allow_once", "reject_once"]


async def test_discord_card_shows_the_change_and_a_long_one_comes_as_a_diff_file(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    change = {"type": "diff", "path": "/w/long.txt", "oldText": OLD, "newText": NEW}
    tool = {"toolCallId": "e1", "title": "Edit long.txt", "kind": "edit", "content": [change]}
    steps = script({"permission": {"toolCall": tool}}, {"chunk": "edited"})
    async with discord_bot(tmp_path, fake_agent, world, diff_file_after=5):
        fake.dm(world.alice, steps)
        card = await _shown(world, dm, "Yes")

        def files() -> list[Any]:
            return [f for m in fake.bot_messages(dm) for f in m.files]

        await wait_for(files, "the .diff attachment", 15)
        _press(world, world.alice, card, "Yes")
        await wait_for(lambda: any("edited" in t for t in shown(fake, dm)), "the final", 15)
    assert "/w/long.txt: +51 \u22121" in card.content
    assert "+line three" in card.content and "added 49" not in card.content
    (patch,) = files()
    assert patch.filename == "long.txt.diff"
    text = patch.data.decode()
    assert text.startswith("--- a/w/long.txt\n+++ b/w/long.txt\n")
    assert "+added 49\n" in text and "-line 3\n" in text
    assert _outcomes(fake_agent) == ["allow_once"]


# ---- a subagent's Stop ---------------------------------------------------------------------------
async def test_a_subagents_stop_on_discord_cancels_the_child_and_the_turn_goes_on(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake = world.fake
    label = "Stop Test investigator"
    steps = script(CANCELLABLE, {"permission": {}}, {"chunk": " parent went on"})
    async with discord_bot(tmp_path, fake_agent, world):
        thread = await _thread_of_mention(world, steps)
        live = await _shown(world, thread, label)
        assert _labels(live) == ["Stop", label]
        refused = _press(world, world.bob, live, label)
        await wait_for(lambda: refused.followups, "bob's notice")
        notice = fake.messages[refused.followups[0]]
        assert notice.ephemeral
        assert notice.content == "Only Alice or an approver can stop this subagent."
        assert cancels(fake_agent) == []
        _press(world, world.alice, live, label)
        await wait_for(lambda: cancels(fake_agent) == [CHILD], "session/cancel for the child")
        await wait_for(lambda: _with_button(world, thread, label) is None, "the button gone", 15)
        card = await _shown(world, thread, "Yes")
        _press(world, world.alice, card, "Yes")
        await wait_for(
            lambda: any("parent went on" in t for t in shown(fake, thread)), "the final", 15
        )
    assert cancels(fake_agent) == [CHILD]  # the parent's session was never cancelled
    assert "permission:allow_once" in "\n".join(shown(fake, thread))
