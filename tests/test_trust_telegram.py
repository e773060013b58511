"""The trust ladder through Telegram: the real python-telegram-bot, our adapter, the fake Bot API,
BotApp in process and the scripted agent as a real subprocess asking the same permission twice.
After **Always** or **Trust this tool for this session** the second request is answered without
a card; a different command still gets one; /trust lists the rule; a `trusted` project's
answers carry the footer line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import ids, serving, telegram_settings
from tests.test_telegram import ALICE, api, settings_for, shows  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

TRUST = "Trust this tool for this session"


def _tool(call: str, command: str) -> dict[str, Any]:
    return {"toolCallId": call, "title": f"Run {command}", "kind": "execute",
            "rawInput": {"command": command}}  # fmt: skip


def _asks(*tools: dict[str, Any]) -> str:
    return script(*({"permission": {"toolCall": tool}} for tool in tools), {"chunk": " all done"})


def _cards(bot_api: FakeBotApi) -> list[Any]:
    """The approval cards, open or closed."""
    return [m for m in bot_api.chat_messages(ALICE.id) if m.text.startswith("The agent wants")]


def _button(message: Any, label: str) -> str:
    buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
    return next(b["callback_data"] for b in buttons if b["text"] == label)


def _outcomes(fake: FakeAgent) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


@pytest.mark.parametrize(
    ("label", "answered", "closing", "source"),
    [
        (
            "Always",
            "allow_always",
            "Allowed always: `npm test …` commands in this session",
            "allowed always",
        ),
        (TRUST, "allow_once", "Trusted for this session: `npm test …` commands", "trusted"),
    ],
    ids=["allow-always", "trust-button"],
)
async def test_the_second_identical_request_is_answered_without_a_card(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
    label: str,
    answered: str,
    closing: str,
    source: str,
) -> None:
    prompt = _asks(_tool("c1", "npm test"), _tool("c2", "npm test --watch"), _tool("c3", "npm ci"))
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, prompt)
        await wait_for(lambda: _cards(api), "the first card", 15)
        first = _cards(api)[0]
        buttons = [b["text"] for row in first.reply_markup["inline_keyboard"] for b in row]
        assert buttons == ["Yes", "Always", "No", TRUST]
        api.press(ALICE, first, _button(first, label))
        await wait_for(lambda: len(_cards(api)) == 2, "the card for a different command", 15)
        second = _cards(api)[1]
        assert "npm ci" in second.text and "--watch" not in second.text
        api.press(ALICE, second, _button(second, "No"))
        await wait_for(shows(api, ALICE.id, "all done"), "the turn to end", 15)
        api.dm(ALICE, "/trust")
        listed = f"1. npm test … commands — {source} by Alice"  # the code span rendered
        await wait_for(shows(api, ALICE.id, listed), "the rule listed", 15)
    assert closing in first.text and first.reply_markup is None
    assert _outcomes(fake_agent) == [answered, answered, "reject_once"]
    assert f"permission:{answered}" in api.chat_text(ALICE.id)


async def test_a_trusted_project_asks_nothing_and_says_so_under_every_answer(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    projects = {"web": {"workspace": str(tmp_path), "approvals": "trusted"}}
    access = {"allowed_users": ids(ALICE)}
    settings = telegram_settings(tmp_path, fake_agent, api, telegram=access, projects=projects)
    async with serving(settings):
        api.dm(ALICE, _asks(_tool("c1", "npm test"), _tool("c2", "rm -rf build")))
        await wait_for(shows(api, ALICE.id, "all done"), "the first answer", 15)
        api.dm(ALICE, "hello")
        await wait_for(shows(api, ALICE.id, "Echo: hello"), "the second answer", 15)
    assert _cards(api) == []
    assert _outcomes(fake_agent) == ["allow_once", "allow_once"]
    footer = "Approvals: trusted (tools run without asking)"
    answers = [
        m.text for m in api.chat_messages(ALICE.id) if "all done" in m.text or "Echo" in m.text
    ]
    assert len(answers) == 2 and all(text.rstrip().endswith(footer) for text in answers), answers
