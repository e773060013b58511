"""A turn's subagents on Telegram end to end (the real python-telegram-bot through our adapter
against the fake Bot API, the scripted agent as a real subprocess): in a group the live reply
carries "Stop <title>" beside its Stop for a subagent the agent lets be cancelled; a stranger's
press is answered and nothing happens; the requester's sends `session/cancel` with the child's
session id and the turn goes on; a subagent's permission request is a card that says whose it is,
answered by a press."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi, Message
from tests.harness.telegram import serving
from tests.test_subagents import CANCELLABLE, CHILD, asks, cancels
from tests.test_telegram import ALICE, BOB, GROUP, settings_for, shows

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


def _buttons(message: Message) -> list[dict[str, Any]]:
    markup = message.reply_markup or {"inline_keyboard": []}
    return [b for row in markup["inline_keyboard"] for b in row]


def _with_button(api: FakeBotApi, topic: int, label: str) -> Message | None:
    return next(
        (
            m
            for m in api.chat_messages(GROUP, thread=topic)
            if any(b["text"] == label for b in _buttons(m))
        ),
        None,
    )


def _press(api: FakeBotApi, who: Any, message: Message, label: str) -> str:
    (data,) = [b["callback_data"] for b in _buttons(message) if b["text"] == label]
    return str(api.press(who, message, data)["callback_query"]["id"])


async def test_a_subagents_stop_on_telegram_cancels_the_child_and_the_turn_goes_on(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    steps = script(CANCELLABLE, {"permission": {}}, {"chunk": " parent went on"})
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {steps}", thread=topic)
        label = "Stop Test investigator"
        await wait_for(lambda: _with_button(api, topic, label), "the subagent's Stop", 15)
        live = _with_button(api, topic, label)
        assert live is not None
        assert [b["text"] for b in _buttons(live)] == ["Stop", label]

        refused = _press(api, BOB, live, label)
        await wait_for(lambda: refused in api.answers, "the stranger's answer", 15)
        assert api.answers[refused]["text"] == "Only Alice or an approver can stop this subagent."
        assert cancels(fake_agent) == []

        pressed = _press(api, ALICE, live, label)
        await wait_for(lambda: pressed in api.answers, "the requester's answer", 15)
        await wait_for(lambda: cancels(fake_agent) == [CHILD], "session/cancel for the child")
        await wait_for(lambda: _with_button(api, topic, label) is None, "the button gone", 15)

        await wait_for(lambda: _with_button(api, topic, "Yes"), "the permission card", 15)
        card = _with_button(api, topic, "Yes")
        assert card is not None
        _press(api, ALICE, card, "Yes")
        await wait_for(shows(api, GROUP, "parent went on"), "the parent's final", 15)
    assert cancels(fake_agent) == [CHILD]
    assert "permission:allow_once" in api.chat_text(GROUP)


async def test_a_subagents_permission_card_on_telegram_says_whose_it_is(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    steps = script(CANCELLABLE, asks(CHILD, "c1", "make test"), {"chunk": " end"})
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {steps}", thread=topic)
        await wait_for(lambda: _with_button(api, topic, "No"), "the card", 15)
        card = _with_button(api, topic, "No")
        assert card is not None
        assert card.text.startswith("Subagent Test investigator wants to use a tool:")
        assert "reply:" not in api.chat_text(GROUP)  # nothing answered before the press
        _press(api, ALICE, card, "No")
        await wait_for(shows(api, GROUP, " end"), "the final", 15)
    assert '"optionId":"reject_once"' in api.chat_text(GROUP)
