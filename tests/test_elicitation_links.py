"""A URL question whose link the platform will not show as a button: the real python-telegram-bot
through our adapter against the fake Bot API set to refuse, as Telegram does, a url button to
localhost or a bare IP address (400 BUTTON_URL_INVALID). The card is posted again without the link
button and with the url in its text; Done still answers it. BotApp in process, the scripted fake
agent sending `elicitation/create`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi, Message, People, linkable_host
from tests.harness.telegram import ids, serving, telegram_settings

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

ALICE = People().alice


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi(refuse_local_urls=True) as fake:
        yield fake


def _keyboard(message: Message) -> list[dict[str, Any]]:
    markup = message.reply_markup or {}
    return [button for row in markup.get("inline_keyboard", []) for button in row]


def url_question(url: str) -> str:
    params = {"mode": "url", "message": "Sign in", "url": url, "elicitationId": "e-1"}
    return script({"request": {"method": "elicitation/create", "params": params}})


def test_the_fake_refuses_the_hosts_telegram_will_not_link() -> None:
    assert linkable_host("https://tracker.example/login")
    for url in ("http://localhost:8080/cb", "http://127.0.0.1:9/x", "http://[::1]/", "http://box/"):
        assert not linkable_host(url), url


async def test_a_refused_link_button_leaves_the_card_with_the_url_in_its_text(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    url = "http://127.0.0.1:8765/callback?state=abc"
    settings = telegram_settings(tmp_path, fake_agent, api, telegram={"allowed_users": ids(ALICE)})
    async with serving(settings):
        api.dm(ALICE, url_question(url))
        chat = ALICE.id

        def shown() -> Message | None:
            return next((m for m in api.chat_messages(chat) if _keyboard(m)), None)

        await wait_for(shown, "the card", 15)
        card = shown()
        assert card is not None
        refused = [c for c in api.calls_to("sendMessage", ok=False) if not c.ok]
        assert [c.description for c in refused] == ["Bad Request: BUTTON_URL_INVALID"]
        assert "Open the link to 127.0.0.1, then press Done." in card.text
        assert f"The link: {url}" in card.text  # plain text, to copy
        assert [b["text"] for b in _keyboard(card)] == ["Done", "Decline", "Cancel"]
        assert not any("url" in b for b in _keyboard(card))
        done = next(b for b in _keyboard(card) if b["text"] == "Done")
        api.press(ALICE, card, done["callback_data"])
        await wait_for(lambda: "reply:" in api.chat_text(chat), "the agent's reply", 15)
    assert '"action":"accept"' in api.chat_text(chat)
    assert "Done (Alice)" in card.text and url in card.text


async def test_a_link_telegram_takes_is_still_a_button(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    url = "https://tracker.example/login"
    settings = telegram_settings(tmp_path, fake_agent, api, telegram={"allowed_users": ids(ALICE)})
    async with serving(settings):
        api.dm(ALICE, url_question(url))

        def shown() -> Message | None:
            return next((m for m in api.chat_messages(ALICE.id) if _keyboard(m)), None)

        await wait_for(shown, "the card", 15)
        card = shown()
        assert card is not None and "The link:" not in card.text
        assert _keyboard(card)[0].get("url") == url
        assert all(c.ok for c in api.calls_to("sendMessage", ok=False))
