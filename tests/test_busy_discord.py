"""A message sent while the agent works, on Discord end to end (the real discord.py through our
adapter against the fake gateway and REST API, the scripted agent as a real subprocess): the
Queued acknowledgement carries a Stop and send component (no Steer now: the agent advertises no
steering); pressed by the writer it stops the running reply and sends the message next, and the
component goes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.busy import QUEUED
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import FakeDiscord, Message
from tests.test_discord import World, discord_bot, shown

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    """As tests/test_discord.py's: a guild where Alice and Bob may chat, Carol approves."""
    fake = FakeDiscord()
    guild = fake.add_guild(channels=("general",))
    people = [fake.user(name) for name in ("Alice", "Bob", "Carol", "Mallory")]
    fake.join(guild, *people)
    await fake.start()
    try:
        yield World(fake, guild, *people)
    finally:
        await fake.close()


def _ack(world: World, dm: str) -> Message | None:
    return next((m for m in world.fake.bot_messages(dm) if m.content.startswith(QUEUED)), None)


async def test_stop_and_send_on_discord_stops_the_reply_and_sends_the_message_next(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, script({"chunk": "working on it"}, {"hang": True}))
        await wait_for(lambda: any("working on it" in t for t in shown(fake, dm)), "the live text")
        fake.dm(world.alice, "the other file")
        await wait_for(lambda: _ack(world, dm), "the Queued acknowledgement", 15)
        ack = _ack(world, dm)
        assert ack is not None
        (button,) = ack.buttons()
        assert button["label"] == "Stop and send" and button["style"] == 4  # danger
        fake.press(world.alice, ack.id, button["custom_id"])
        await wait_for(lambda: "Echo: the other file" in shown(fake, dm), "the message's reply", 15)
        await wait_for(lambda: not ack.buttons(), "the component to go")
    assert ack.content.startswith(QUEUED + "\nStopping the current reply")
    assert any("The turn was stopped." in t for t in shown(fake, dm))
    assert fake_agent.prompt_texts()[1:] == ["the other file"]
