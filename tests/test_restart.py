"""A restart never leaves a person without an answer: the journal of turns in flight.

End to end, the real `switchboard run` serves the fake Telegram Bot API (tests/fakes/telegram_api.py)
with the scripted fake agent, and is killed with SIGKILL mid-reply, after its reply was delivered,
or after its final text was computed but could not be delivered; then it is started again on the
same state file. In process, `BotApp` on a scripted surface shows how journal entries left by an
earlier process are told once, and wait for a surface that is not running."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from bot.notices import RESTART_NOTICE
from bot.store import JournalEntry, SqliteStateStore
from bot.turn_journal import JOURNAL_TTL
from surfaces.base import ConversationKey
from surfaces.errors import SendFailed
from tests.conftest import FakeAgent
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.fakes.telegram_api import ApiCall, FakeBotApi, People
from tests.harness.process import run_env
from tests.harness.telegram import switchboard_run, telegram_env

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("reap_agents")]

ALICE = People().alice
SHOWN = ("sendMessage", "sendMessageDraft", "editMessageText")  # what a person can see


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        yield fake


@pytest.fixture
def env(
    cli_env: dict[str, str], fake_agent: FakeAgent, api: FakeBotApi, workspace: Path
) -> dict[str, str]:
    return cli_env | run_env(fake_agent, workspace) | telegram_env(api, ALICE)


async def sigkill(process: anyio.abc.Process) -> None:
    process.send_signal(signal.SIGKILL)
    with anyio.fail_after(5):
        assert await process.wait() == -signal.SIGKILL


def shown_since(api: FakeBotApi, mark: int) -> list[ApiCall]:
    """Calls after the first `mark` that put text in front of Alice (drafts included)."""
    return [call for call in api.calls[mark:] if call.method in SHOWN and call.chat_id == ALICE.id]


async def settled(state: Path) -> None:
    """Wait until the bot has recorded that no turn is in flight and nothing awaits delivery."""
    store = SqliteStateStore(state)
    try:
        with anyio.fail_after(10):
            while await store.journal_open_turns() or await store.ledger_pending():
                await anyio.sleep(0.05)
    finally:
        await store.aclose()


def drafted(api: FakeBotApi, text: str) -> bool:
    return any(text in call.params.get("text", "") for call in api.calls_to("sendMessageDraft"))


# ---- end to end: switchboard run on Telegram ---------------------------------------------------
async def test_a_reply_cut_off_by_sigkill_gets_one_notice_after_the_restart_and_none_later(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    async with switchboard_run(env, api, tmp_path) as first:
        api.dm(ALICE, "SCN_SLOW_STREAM")
        await wait_for(lambda: drafted(api, "first part"), "the reply to stream as drafts", 15)
        assert api.calls_to("sendMessage") == []  # only drafts: nothing of it was persisted
        await sigkill(first)

    mark = len(api.calls)
    async with switchboard_run(env, api, tmp_path):
        (notice,) = shown_since(api, mark)
        assert notice.method == "sendMessage"
        assert notice.at < api.calls_to("getUpdates")[-1].at  # told before taking events
    assert api.chat_text(ALICE.id) == RESTART_NOTICE
    assert len(fake_agent.frames_in("session/prompt")) == 1  # not asked again

    mark = len(api.calls)
    async with switchboard_run(env, api, tmp_path):
        pass
    assert shown_since(api, mark) == []  # said once, never again


async def test_a_message_waiting_behind_a_turn_cut_off_by_sigkill_is_answered_after_the_restart(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    """A crash costs the reply being written, not the messages waiting behind it."""
    async with switchboard_run(env, api, tmp_path) as first:
        api.dm(ALICE, "SCN_SLOW_STREAM")
        await wait_for(lambda: drafted(api, "first part"), "the reply to stream as drafts", 15)
        api.dm(ALICE, "and then this")
        await wait_for(
            lambda: any("Queued" in call.params.get("text", "") for call in api.calls),
            "the second message to be queued",
            15,
        )
        await sigkill(first)

    async with switchboard_run(env, api, tmp_path):
        await wait_for(
            lambda: "Echo: and then this" in api.chat_text(ALICE.id), "the waiting message", 20
        )
    texts = [call.params.get("text", "") for call in api.calls_to("sendMessage")]
    assert sum(RESTART_NOTICE in text for text in texts) == 1
    assert sum("Echo: and then this" in text for text in texts) == 1
    assert fake_agent.prompt_texts().count("and then this") == 1  # asked once, after the restart


async def test_a_reply_delivered_before_sigkill_is_followed_by_nothing_after_the_restart(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    async with switchboard_run(env, api, tmp_path) as first:
        api.dm(ALICE, "hello")
        await wait_for(lambda: "Echo: hello" in api.chat_text(ALICE.id), "the reply", 15)
        await settled(tmp_path / "state.db")
        await sigkill(first)

    mark = len(api.calls)
    async with switchboard_run(env, api, tmp_path):
        pass
    assert shown_since(api, mark) == []
    assert api.chat_text(ALICE.id) == "Echo: hello"


async def test_a_final_reply_killed_on_its_way_out_is_resent_instead_of_a_notice(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    # Telegram holds the final back for a minute: it was computed, and the process dies waiting.
    api.fail_next("sendMessage", 429, retry_after=60, chat_id=ALICE.id)
    async with switchboard_run(env, api, tmp_path) as first:
        api.dm(ALICE, "hello")
        await wait_for(lambda: api.calls_to("sendMessage", ok=False), "the held-back reply", 15)
        await sigkill(first)

    mark = len(api.calls)
    async with switchboard_run(env, api, tmp_path):
        (resent,) = shown_since(api, mark)
    assert resent.method == "sendMessage"
    assert api.chat_text(ALICE.id) == "Echo: hello"  # the answer, and no notice


async def test_a_reply_stopped_by_sigterm_keeps_its_partial_output_and_no_notice_follows(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, env: dict[str, str]
) -> None:
    async with switchboard_run(env, api, tmp_path):
        api.dm(ALICE, "SCN_SLOW_STREAM")
        await wait_for(lambda: drafted(api, "first part"), "the reply to stream as drafts", 15)
    partial = api.chat_text(ALICE.id)
    assert partial.startswith("Working on it: first part,") and "stopped" in partial

    mark = len(api.calls)
    async with switchboard_run(env, api, tmp_path):
        pass
    assert shown_since(api, mark) == []


# ---- in process: turns an earlier process left in the journal -----------------------------------
async def leave_in_journal(state: Path, *keys: ConversationKey) -> None:
    """What a process killed mid-turn leaves behind: open journal entries, one per key."""
    store = SqliteStateStore(state)
    try:
        for index, key in enumerate(keys):
            turn = JournalEntry(f"turn-{index}", key, "alice", time.time())
            await store.journal_open(turn, JOURNAL_TTL)
    finally:
        await store.aclose()


def sent(surface: ScriptedSurface) -> list[tuple[ConversationKey | None, str]]:
    return [(call.key, call.text) for call in surface.ops("send")]


async def test_each_conversation_with_a_turn_left_open_is_told_once_before_events_are_taken(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    thread = ConversationKey(CHAT.surface, "chat-2", "topic-9")
    await leave_in_journal(tmp_path / "state.db", CHAT, thread)

    surface = ScriptedSurface()
    async with running_app(settings, surface):
        assert sent(surface) == [(CHAT, RESTART_NOTICE), (thread, RESTART_NOTICE)]
    again = ScriptedSurface()
    async with running_app(settings, again):
        pass
    assert again.calls == []


async def test_a_turn_of_a_surface_that_is_not_running_waits_until_it_runs(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    elsewhere = ConversationKey("slack", "C1", "1700000000.000100")
    await leave_in_journal(tmp_path / "state.db", elsewhere)

    telegram = ScriptedSurface()
    async with running_app(settings, telegram):
        pass
    assert telegram.calls == []
    slack = ScriptedSurface("slack")
    async with running_app(settings, slack):
        assert sent(slack) == [(elsewhere, RESTART_NOTICE)]


async def test_a_notice_that_cannot_be_delivered_is_resent_by_the_ledger_not_repeated(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    await leave_in_journal(tmp_path / "state.db", CHAT)

    broken = ScriptedSurface()
    broken.fail_always("send", SendFailed("the platform is down", transient=False))
    async with running_app(settings, broken):
        pass
    healthy = ScriptedSurface()
    async with running_app(settings, healthy):
        assert sent(healthy) == [(CHAT, RESTART_NOTICE)]
    third = ScriptedSurface()
    async with running_app(settings, third):
        pass
    assert third.calls == []


async def test_a_turn_that_ends_in_an_unexpected_error_is_not_reported_as_cut_off(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    surface = ScriptedSurface()
    surface.fail_always("ask_choice", SendFailed("buttons are broken", transient=False))
    # The process lived: whether the error also ended the app is fault isolation's business.
    with contextlib.suppress(BaseExceptionGroup, SendFailed):
        async with running_app(settings, surface):
            await finished(surface.post(surface.message("alice", "SCN_PERMISSION")))
    assert [call.op for call in surface.calls if call.error is not None] == ["ask_choice"]

    store = SqliteStateStore(tmp_path / "state.db")
    try:
        assert await store.journal_open_turns() == []
    finally:
        await store.aclose()
