"""A message sent while the agent works, on Telegram end to end (the real python-telegram-bot
through our adapter against the fake Bot API, the scripted agent as a real subprocess): the
Queued acknowledgement carries an inline Stop and send button (no Steer now: the agent advertises
no steering), a stranger to the message is answered and nothing happens, the writer's press stops
the running reply (its partial text kept) and sends the message next; the button goes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.busy import QUEUED
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi, Message
from tests.harness.telegram import serving
from tests.test_telegram import ALICE, BOB, GROUP, settings_for, shows

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


def _ack(api: FakeBotApi, topic: int) -> Message | None:
    return next(
        (m for m in api.chat_messages(GROUP, thread=topic) if m.text.startswith(QUEUED)), None
    )


def _buttons(message: Message) -> list[dict[str, Any]]:
    markup = message.reply_markup or {"inline_keyboard": []}
    return [b for row in markup["inline_keyboard"] for b in row]


async def test_stop_and_send_on_telegram_refuses_a_stranger_and_sends_the_message_next(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    hanging = script({"chunk": "working"}, {"hang": True})
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {hanging}", thread=topic)
        await wait_for(shows(api, GROUP, "working"), "the live reply", 15)
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} use the other file", thread=topic)
        await wait_for(lambda: _ack(api, topic), "the Queued acknowledgement", 15)
        ack = _ack(api, topic)
        assert ack is not None and ack.text == QUEUED
        (button,) = _buttons(ack)
        assert button["text"] == "Stop and send"
        refused = api.press(BOB, ack, button["callback_data"])
        query = refused["callback_query"]["id"]
        await wait_for(lambda: query in api.answers, "the stranger's answer", 15)
        assert api.answers[query]["text"] == "Only Alice or an approver can do this."
        assert not fake_agent.frames_in("session/cancel")
        api.press(ALICE, ack, button["callback_data"])
        await wait_for(shows(api, GROUP, "Echo: use the other file"), "the message's reply", 15)
        await wait_for(lambda: ack.reply_markup is None, "the button to go", 15)
    assert ack.text.startswith(QUEUED + "\nStopping the current reply")
    assert "The turn was stopped." in api.chat_text(GROUP)
    assert len(fake_agent.frames_in("session/cancel")) == 1
    assert fake_agent.prompt_texts()[1:] == ["use the other file"]
