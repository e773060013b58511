"""The agent's questions on Telegram: the real python-telegram-bot through our adapter against the
fake Bot API, BotApp in process, the scripted fake agent sending `elicitation/create`. A choice is
inline buttons, a typed field a force-reply prompt the person answers by replying; a URL question
an inline link button, closed by the agent's `elicitation/complete`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from config import Settings
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi, Message, People
from tests.harness.telegram import ids, serving, telegram_settings

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

GROUP = -1001234567890
PEOPLE = People()
ALICE, BOB, CAROL = PEOPLE.alice, PEOPLE.bob, PEOPLE.carol


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


def settings_for(tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi) -> Settings:
    access = {
        "allowed_users": ids(ALICE, BOB),
        "approvers": ids(CAROL),
        "allowed_chats": [str(GROUP)],
    }
    return telegram_settings(tmp_path, fake_agent, api, telegram=access)


def _keyboard(message: Message) -> list[dict[str, Any]]:
    markup = message.reply_markup or {}
    return [button for row in markup.get("inline_keyboard", []) for button in row]


def button(message: Message, text: str) -> dict[str, Any]:
    return next(b for b in _keyboard(message) if b["text"] == text)


def open_card(api: FakeBotApi, heading: str) -> Message | None:
    return next((m for m in api.chat_messages(GROUP) if heading in m.text and _keyboard(m)), None)


def reply_of_agent(api: FakeBotApi) -> dict[str, Any]:
    text = api.chat_text(GROUP)
    start = text.index("reply:") + len("reply:")
    result, _ = json.JSONDecoder().raw_decode(text[start:])
    return dict(result["result"])


FORM = {
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
                    "why": {"type": "string", "title": "Why"},
                },
                "required": ["db", "why"],
            },
        },
    }
}


async def test_a_form_is_buttons_then_a_force_reply_and_only_alice_or_an_approver_answers(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {script(FORM)}", thread=topic)
        await wait_for(lambda: open_card(api, "Question 1 of 2"), "the first card", 15)
        first = open_card(api, "Question 1 of 2")
        assert first is not None and first.thread == topic
        assert "The agent asks Alice (or an approver):" in first.text
        assert [b["text"] for b in _keyboard(first)] == [
            "PostgreSQL",
            "SQLite",
            "Decline",
            "Cancel",
        ]
        assert all(len(b["callback_data"].encode()) <= 64 for b in _keyboard(first))
        sqlite = button(first, "SQLite")["callback_data"]

        refused = api.press(BOB, first, sqlite)
        query = refused["callback_query"]["id"]
        await wait_for(lambda: query in api.answers, "bob's answer")
        assert "Alice" in api.answers[query]["text"]
        api.press(ALICE, first, sqlite)
        await wait_for(lambda: first.text.endswith("Answered by Alice: SQLite"), "card 1 closed")

        def prompt() -> Message | None:
            return next(
                (m for m in api.chat_messages(GROUP) if "force_reply" in (m.reply_markup or {})),
                None,
            )

        await wait_for(prompt, "the force-reply prompt", 15)
        asked = prompt()
        assert asked is not None and asked.reply_markup is not None
        assert asked.reply_markup.get("selective") is True
        second = open_card(api, "Question 2 of 2")
        assert second is not None
        assert [b["text"] for b in _keyboard(second)] == ["Decline", "Cancel"]
        api.post_message(GROUP, ALICE, "It is one file", thread=topic, reply_to=asked)
        await wait_for(lambda: "reply:" in api.chat_text(GROUP), "the agent's reply", 15)
        await wait_for(lambda: second.text.endswith("Answered by Alice."), "card 2 closed")
    assert reply_of_agent(api) == {
        "action": "accept",
        "content": {"db": "lite", "why": "It is one file"},
    }
    assert fake_agent.prompt_texts() == [script(FORM)]


async def test_a_url_question_is_a_link_button_and_the_agents_complete_closes_the_card(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    params = {
        "mode": "url",
        "message": "Sign in to the tracker",
        "url": "https://tracker.example/login",
        "elicitationId": "e-7",
    }
    steps = script(
        {"request": {"method": "elicitation/create", "params": params}},
        {"notify": {"method": "elicitation/complete", "params": {"elicitationId": "e-7"}}},
    )
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        chat = ALICE.id

        def shown() -> Message | None:
            return next((m for m in api.chat_messages(chat) if _keyboard(m)), None)

        await wait_for(shown, "the link card", 15)
        card = shown()
        assert card is not None and "Open the link to tracker.example" in card.text
        link = button(card, "Open tracker.example")
        assert link["url"] == params["url"] and "callback_data" not in link
        api.press(ALICE, card, button(card, "Done")["callback_data"])
        await wait_for(lambda: "complete" in card.text, "the card closed by the agent", 15)
        assert not _keyboard(card)
    assert "reply:" in api.chat_text(chat)
    assert '"action":"accept"' in api.chat_text(chat)
