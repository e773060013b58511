"""A choice token counts only where its card was shown (bot/permissions.py `refuse_misplaced`):
an approval button's token pressed from another chat, by the requester, by someone who is neither
the requester nor an approver, or by an approver, is refused before anything else, audited as
"wrong conversation", answered as an unknown token is, and never reaches the agent; so is the
Stop button's. Cards an earlier process left open are closed at start and their tokens dropped:
the real `switchboard run` on the Telegram fake, killed with SIGKILL while a card waits."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from bot.permissions import NOT_PENDING, WITHDRAWN, WRONG_CONVERSATION
from bot.store import ApprovalRecord, SqliteStateStore
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.fakes.telegram_api import FakeBotApi, Message
from tests.harness.process import run_env
from tests.harness.telegram import serving, switchboard_run, telegram_env
from tests.store_backends import Backend
from tests.test_engine import permission_outcomes
from tests.test_stop_button import _started
from tests.test_telegram import ALICE, BOB, CAROL, GROUP, settings_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env", "reap_agents")]


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


def _card(api: FakeBotApi, chat: int) -> Message | None:
    return next((m for m in api.chat_messages(chat) if m.reply_markup), None)


def _elsewhere(chat: dict[str, Any]) -> Message:
    """A message in another chat: where a forged press says it comes from."""
    return Message(9999, chat, BOB.as_dict(), "anything")


async def _audited(state: Path) -> list[dict[str, str]]:
    store = SqliteStateStore(state)
    try:
        records = await store.audit_since(0)
    finally:
        await store.aclose()
    return [{"actor": r.actor, "action": r.action, **r.details} for r in records]


async def test_a_forged_press_from_another_chat_is_refused_audited_and_never_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    settings = settings_for(tmp_path, fake_agent, api)
    async with serving(settings):
        api.dm(ALICE, "SCN_PERMISSION")
        await wait_for(lambda: _card(api, ALICE.id), "the approval card", 15)
        card = _card(api, ALICE.id)
        assert card is not None and card.reply_markup is not None
        yes = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
        bobs, group = api.private_chat(BOB), api.chats[GROUP]
        forged = [
            api.press(ALICE, _elsewhere(bobs), yes),  # "from" the requester, in Bob's chat
            api.press(BOB, _elsewhere(bobs), yes),  # neither the requester nor an approver
            api.press(CAROL, _elsewhere(group), yes),  # an approver, in a group
        ]
        ids = [press["callback_query"]["id"] for press in forged]
        await wait_for(lambda: all(i in api.answers for i in ids), "the forged presses' answers")
        assert [api.answers[i]["text"] for i in ids] == [NOT_PENDING] * 3  # no hint of the token
        assert card.reply_markup is not None  # still open: nothing was answered
        assert permission_outcomes(fake_agent) == []
        taken = api.press(ALICE, card, yes)  # the requester, in the card's own chat
        await wait_for(lambda: card.reply_markup is None, "the buttons to go", 15)
        assert "text" not in api.answers.get(taken["callback_query"]["id"], {})
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    refused = [r for r in await _audited(tmp_path / "state.db") if r.get("reason")]
    assert [(r["actor"], r["action"], r["reason"]) for r in refused] == [
        (str(ALICE.id), "approval", WRONG_CONVERSATION),
        (str(BOB.id), "approval", WRONG_CONVERSATION),
        (str(CAROL.id), "approval", WRONG_CONVERSATION),
    ]
    assert all(r["card_chat"] == str(ALICE.id) for r in refused)
    assert [r["chat"] for r in refused] == [str(BOB.id), str(BOB.id), str(GROUP)]
    assert not any(yes in str(r) for r in refused)  # the audit keeps no token


async def test_a_stop_button_pressed_from_another_chat_stops_nothing_and_is_audited(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    other = ConversationKey(CHAT.surface, "chat-elsewhere")
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn, button = await _started(surface)
        await finished(surface.post(surface.press("alice", button.token, key=other)))
        assert app.runners[CHAT].running and fake_agent.frames_in("session/cancel") == []
        assert surface.notices() == ["That reply has already finished."]  # as for an old one
        await finished(surface.post(surface.press("alice", button.token)), turn)  # in its chat
        records = await app.store.audit_since(0)
    assert len(fake_agent.frames_in("session/cancel")) == 1
    (refused,) = [r for r in records if r.details.get("reason") == WRONG_CONVERSATION]
    assert refused.action == "stop" and refused.actor == "alice"
    assert refused.details["card_chat"] == CHAT.chat and refused.details["chat"] == other.chat


async def test_pending_approvals_list_with_their_card_and_replica_on_every_store(
    backend: Backend,
) -> None:
    store = backend.open()
    try:
        key = ConversationKey("telegram", "42", "7")
        records = [
            ApprovalRecord(token, "g1", option, "alice", key, time.time(), "replica-a")
            for token, option in (("t-yes", "allow_once"), ("t-no", "reject_once"))
        ]
        await store.put_approvals(records, 300)
        await store.approval_shown("g1", "555")
        pending = await store.approvals_pending()
        assert {r.token for r in pending} == {"t-yes", "t-no"}
        assert {(r.group, r.key, r.replica, r.message) for r in pending} == {
            ("g1", key, "replica-a", "555")
        }
        taken = await store.take_approval("t-yes")
        assert taken is not None and taken.message == "555" and taken.replica == "replica-a"
        assert await store.approvals_pending() == []
    finally:
        await store.aclose()


# ---- end to end: a card left by a killed process --------------------------------------------------
@pytest.fixture
def env(
    cli_env: dict[str, str], fake_agent: FakeAgent, api: FakeBotApi, workspace: Path
) -> dict[str, str]:
    return (
        cli_env
        | run_env(fake_agent, workspace)  # the state file stays outside the workspace
        | telegram_env(api, ALICE)
        | {"SWITCHBOARD_HTTP__PORT": "off"}
    )


async def _noted(state: Path) -> None:
    """Wait until the store knows the card's message (a crash in the moment between the card's
    post and this note leaves its buttons; its tokens are dropped all the same)."""
    store = SqliteStateStore(state)
    try:
        with anyio.fail_after(10):
            while not any(record.message for record in await store.approvals_pending()):
                await anyio.sleep(0.05)
    finally:
        await store.aclose()


async def test_a_card_left_by_a_killed_process_loses_its_buttons_at_restart(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    async with switchboard_run(env, api, tmp_path) as first:
        api.dm(ALICE, "SCN_PERMISSION")
        await wait_for(lambda: _card(api, ALICE.id), "the approval card", 15)
        await _noted(tmp_path / "state.db")
        first.send_signal(signal.SIGKILL)
        with anyio.fail_after(5):
            assert await first.wait() == -signal.SIGKILL
    card = _card(api, ALICE.id)
    assert card is not None and card.reply_markup is not None  # the killed process left it
    yes = card.reply_markup["inline_keyboard"][0][0]["callback_data"]

    async with switchboard_run(env, api, tmp_path):
        assert card.reply_markup is None  # withdrawn before events are taken
        assert card.text == WITHDRAWN
        late = api.press(ALICE, card, yes)
        query = late["callback_query"]["id"]
        await wait_for(lambda: query in api.answers, "the late press's answer", 15)
        assert api.answers[query]["text"] == NOT_PENDING
    assert permission_outcomes(fake_agent) == []
    store = SqliteStateStore(tmp_path / "state.db")
    try:
        assert await store.approvals_pending() == []
    finally:
        await store.aclose()
