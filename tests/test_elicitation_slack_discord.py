"""Typed answers to the agent's questions on Slack and Discord, where a channel message reaches
the bot only when it mentions it (or sits in a thread the bot knows): the prompt mentions the
person, and their next message in that conversation is taken as the answer though it mentions
nobody; anyone else's plain message is still not taken. The real slack_sdk / slack_bolt and
discord.py through our adapters against the fakes, BotApp in process, the scripted fake agent
sending `elicitation/create`. Plus the awaited notes themselves, on an injected clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surfaces.awaited_replies import AwaitedReplies
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import button_press, channel_message, envelope, mention
from tests.test_discord import World, discord_bot, shown, world  # noqa: F401 (a fixture)
from tests.test_slack import ALICE, BOB, BOT, CHANNEL, slack_bot

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

NAME_FORM = script(
    {
        "request": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Who signs the release?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "title": "Name"}},
                    "required": ["name"],
                },
            },
        }
    }
)


def agent_answer(text: str) -> dict[str, Any]:
    """What the agent's request was answered, from its reply chunk ("reply:<JSON>")."""
    start = text.index("reply:") + len("reply:")
    result, _ = json.JSONDecoder().raw_decode(text[start:])
    return dict(result["result"])


# ---- Slack -----------------------------------------------------------------------------------


async def test_slack_takes_the_asked_persons_plain_channel_message_as_the_answer(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, NAME_FORM)

        def prompt() -> str:
            asked = [m.visible for m in env.fake.in_thread(CHANNEL, thread)]
            return next((text for text in asked if "your answer to “Name”" in text), "")

        await wait_for(prompt, "the prompt for the typed answer", 15)
        assert prompt().startswith(f"<@{ALICE}> ")  # the person is mentioned in a channel
        # Plain messages at the channel's top level: Bob's is not awaited, Alice's is.
        ts = env.fake.next_ts()
        await env.deliver(envelope(channel_message(CHANNEL, BOB, "Bob, surely", ts=ts)))
        ts = env.fake.next_ts()
        await env.deliver(envelope(channel_message(CHANNEL, ALICE, "Ann", ts=ts)))
        text = await env.answered(CHANNEL, thread, "reply:")
        everything = "\n".join(m.visible for m in env.fake.in_thread(CHANNEL, thread))
    assert agent_answer(text) == {"action": "accept", "content": {"name": "Ann"}}
    assert "Answered by" in everything and "Queued" not in everything
    assert env.fake.in_thread(CHANNEL) == []  # the bot said nothing at the top level
    assert fake_agent.prompt_texts() == [NAME_FORM]


# ---- Discord ---------------------------------------------------------------------------------


async def test_discord_takes_the_asked_persons_unmentioned_message_in_a_channel_conversation(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,  # noqa: F811 (the fixture)
) -> None:
    fake, general = world.fake, world.general
    fake.fail_next("start_thread", status=403)  # no thread: the channel is the conversation
    async with discord_bot(tmp_path, fake_agent, world):
        fake.post(general, world.alice, NAME_FORM, mention=True)

        def prompt() -> str:
            return next((t for t in shown(fake, general) if "your answer to “Name”" in t), "")

        await wait_for(prompt, "the prompt for the typed answer", 15)
        assert prompt().startswith(f"<@{world.alice.id}> ")
        (asking,) = [
            c.body
            for c in fake.routes("create_message", general)
            if "your answer to" in str((c.body or {}).get("content"))
        ]
        assert [str(u) for u in asking["allowed_mentions"]["users"]] == [world.alice.id]  # hers
        fake.post(general, world.bob, "Bob, surely")  # nobody awaits his
        fake.post(general, world.alice, "Ann")  # no mention: awaited
        await wait_for(lambda: "reply:" in "\n".join(shown(fake, general)), "the reply", 15)
    assert agent_answer("\n".join(shown(fake, general))) == {
        "action": "accept",
        "content": {"name": "Ann"},
    }
    assert fake.threads() == []
    assert fake_agent.prompt_texts() == [NAME_FORM]


# ---- the notes ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_note_is_for_one_person_one_message_and_the_wait() -> None:
    clock = Clock()
    notes = AwaitedReplies(60, clock=clock)
    thread = ConversationKey("slack", "C1", "17.1")
    notes.expect(thread, "UALICE")
    assert notes.awaited_in(ConversationKey("slack", "C1"), "UALICE") == thread
    assert notes.awaited_in(ConversationKey("slack", "C1"), "UBOB") is None
    assert notes.awaited_in(ConversationKey("slack", "C2"), "UALICE") is None
    assert not notes.take(thread, "UBOB")
    assert notes.take(thread, "UALICE")
    assert not notes.take(thread, "UALICE")  # the first message only
    assert notes.awaited_in(ConversationKey("slack", "C1"), "UALICE") is None
    notes.expect(thread, "UALICE")
    clock.now += 61
    assert notes.awaited_in(ConversationKey("slack", "C1"), "UALICE") is None
    assert not notes.take(thread, "UALICE")  # past the wait
    assert len(notes) == 0


def test_the_notes_are_bounded() -> None:
    notes = AwaitedReplies(60, clock=Clock(), limit=2)
    keys = [ConversationKey("discord", str(n)) for n in range(3)]
    for key in keys:
        notes.expect(key, "1")
    assert len(notes) == 2
    assert not notes.take(keys[0], "1") and notes.take(keys[2], "1")


async def test_slack_forgets_the_wait_once_the_card_is_answered_otherwise(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    second = script({"chunk": "second turn"})
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, NAME_FORM)

        def card() -> Any:  # the question's card, not the live reply with its Stop button
            return next(
                (
                    m
                    for m in env.fake.in_thread(CHANNEL, thread)
                    if any(b["text"]["text"] == "Decline" for b in m.buttons)
                ),
                None,
            )

        await wait_for(card, "the card", 15)
        decline = next(b["value"] for b in card().buttons if b["text"]["text"] == "Decline")
        await env.press(button_press(CHANNEL, ALICE, card(), decline))
        await env.answered(CHANNEL, thread, "reply:")
        # Her plain channel message now is for the channel, not for the bot.
        ts = env.fake.next_ts()
        await env.deliver(envelope(channel_message(CHANNEL, ALICE, "lunch?", ts=ts)))
        # then a mention in the thread: in the thread's lane after "lunch?", were it taken
        event = mention(CHANNEL, ALICE, f"{BOT} {second}", ts=env.fake.next_ts(), thread_ts=thread)
        await env.deliver(envelope(event))
        await env.answered(CHANNEL, thread, "second turn")
    assert fake_agent.prompt_texts() == [NAME_FORM, second]
