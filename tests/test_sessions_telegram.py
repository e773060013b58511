"""`/sessions` and `/resume` on Telegram end to end (the real python-telegram-bot against the fake
Bot API, BotApp in process, the scripted fake agent offering `session/list`): each person sees
their own conversation's sessions; sessions of another person's conversation only an admin sees,
and only an admin may resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import load_settings
from tests.conftest import FakeAgent
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving
from tests.test_telegram import ALICE, BOB, CAROL, api, settings_for, shows  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


def session_of(agent: FakeAgent, text: str) -> str:
    """The session the prompt `text` went to."""
    (frame,) = [
        f for f in agent.frames_in("session/prompt") if f["params"]["prompt"][0]["text"] == text
    ]
    session_id: str = frame["params"]["sessionId"]
    return session_id


def rows(listing: str) -> int:
    return sum(" — " in line for line in listing.splitlines())


def last_message(api: FakeBotApi, chat: int) -> str:  # noqa: F811
    return api.chat_messages(chat)[-1].text


async def test_another_persons_session_is_hidden_from_a_non_admin_and_shown_to_an_admin(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    settings = settings_for(tmp_path, fake_agent, api, "--session-list", admins=[str(CAROL.id)])
    async with serving(settings):
        api.dm(ALICE, "alice topic")
        api.dm(BOB, "bob topic")
        await wait_for(shows(api, ALICE.id, "Echo: alice topic"), "alice's reply")
        await wait_for(shows(api, BOB.id, "Echo: bob topic"), "bob's reply")
        alice, bob = session_of(fake_agent, "alice topic"), session_of(fake_agent, "bob topic")

        api.dm(ALICE, "/sessions")
        await wait_for(shows(api, ALICE.id, "Resume one with"), "alice's list")
        shown = last_message(api, ALICE.id)
        assert alice[:8] in shown and "(current)" in shown
        assert rows(shown) == 1 and "bob topic" not in shown

        api.dm(ALICE, f"/resume {bob}")
        await wait_for(shows(api, ALICE.id, "only an admin"), "the refusal")
        assert last_message(api, ALICE.id) == (
            "That session is not one of this conversation's; only an admin can resume it."
        )

        api.dm(CAROL, "/sessions")
        await wait_for(shows(api, CAROL.id, "Resume one with"), "carol's list")
        shown = last_message(api, CAROL.id)
        assert "alice topic" in shown and "bob topic" in shown
        assert shown.count("(another conversation)") == 2
        assert "shown to admins only" in shown

        # Bob's conversation holds its session: an admin is not let into it meanwhile
        api.dm(CAROL, f"/resume {bob}")
        await wait_for(shows(api, CAROL.id, "using that session"), "the refusal")
        assert (
            last_message(api, CAROL.id) == "Another conversation is using that session right now."
        )
    assert fake_agent.frames_in("session/load") == []
    prompted = sorted(f["params"]["sessionId"] for f in fake_agent.frames_in("session/prompt"))
    assert prompted == sorted([alice, bob])  # nobody's conversation moved


async def test_resume_in_a_dm_binds_the_conversation_and_the_next_message_goes_there(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    settings = settings_for(tmp_path, fake_agent, api, "--session-list")
    async with serving(settings):
        api.dm(ALICE, "first topic")
        await wait_for(shows(api, ALICE.id, "Echo: first topic"), "the first reply")
        api.dm(ALICE, "/new")
        api.dm(ALICE, "second topic")
        await wait_for(shows(api, ALICE.id, "Echo: second topic"), "the second reply")
        first = session_of(fake_agent, "first topic")
        api.dm(ALICE, f"/resume {first[:10]}")
        await wait_for(shows(api, ALICE.id, "Resumed session"), "the resume")
        assert last_message(api, ALICE.id) == (
            f"Resumed session {first} (first topic); the next message continues it."
        )
        api.dm(ALICE, "third topic")
        await wait_for(shows(api, ALICE.id, "Echo: third topic"), "the third reply")
    assert session_of(fake_agent, "third topic") == first
    (loaded,) = fake_agent.frames_in("session/load")
    assert loaded["params"]["sessionId"] == first


async def test_without_session_list_a_dm_lists_its_own_sessions_from_the_store(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    settings = settings_for(tmp_path, fake_agent, api)
    async with serving(settings):
        api.dm(ALICE, "first topic")
        await wait_for(shows(api, ALICE.id, "Echo: first topic"), "the first reply")
        api.dm(BOB, "bob topic")
        await wait_for(shows(api, BOB.id, "Echo: bob topic"), "bob's reply")
        api.dm(ALICE, "/sessions")
        await wait_for(shows(api, ALICE.id, "Resume one with"), "the list")
        shown = last_message(api, ALICE.id)
    alice = session_of(fake_agent, "first topic")
    assert alice[:8] in shown and rows(shown) == 1
    assert fake_agent.frames_in("session/list") == []


async def test_a_person_who_may_not_use_the_project_is_shown_none_of_its_sessions(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    base = settings_for(tmp_path, fake_agent, api, "--session-list")
    command = fake_agent.command("--session-list")
    projects = {
        "api": {
            "workspace": str(tmp_path),
            "agent": "kiro",
            "agent_command": command,
            "users": [f"telegram:{ALICE.id}"],
        }
    }
    settings = load_settings(
        **base.model_dump(exclude={"projects", "default_project"}, exclude_unset=True),
        projects=projects,
        default_project="api",
    )
    async with serving(settings):
        api.dm(ALICE, "alice topic")
        await wait_for(shows(api, ALICE.id, "Echo: alice topic"), "alice's reply")
        alice = session_of(fake_agent, "alice topic")
        api.dm(BOB, "/sessions")
        api.dm(BOB, f"/resume {alice}")
        await wait_for(lambda: len(api.chat_messages(BOB.id)) == 2, "bob's answers")
    refused = "You may not use this conversation's project, so its sessions are not shown."
    assert [m.text for m in api.chat_messages(BOB.id)] == [refused, refused]
    assert fake_agent.frames_in("session/load") == []
