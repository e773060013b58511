"""The store's per-conversation settings (`conversation_setting` / `set_conversation_setting`,
what `/busy` keeps): on SQLite and a real Redis, per conversation and per name, None forgets,
kept across a reopened store; a state file written before the table existed gains it; the outage
wrapper passes them through (an outage is `StoreUnavailable`)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import stamina

from bot.store import (
    OutageTolerantStore,
    SqliteStateStore,
    StateStore,
    StoreUnavailable,
)
from bot.store.redis import RedisStateStore
from surfaces.base import ConversationKey
from tests.store_backends import Backend, RedisProcess

pytestmark = pytest.mark.anyio

CHAT = ConversationKey("telegram", "1001", "")
TOPIC = ConversationKey("telegram", "1001", "7")
ODD = ConversationKey("slack", "C:1", "17.2:x")  # ids with colons stay apart


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StateStore]:
    s = backend.open()
    yield s
    await s.aclose()


async def test_a_setting_is_kept_per_conversation_and_per_name(store: StateStore) -> None:
    assert await store.conversation_setting(CHAT, "busy_mode") is None
    await store.set_conversation_setting(CHAT, "busy_mode", "steer")
    await store.set_conversation_setting(TOPIC, "busy_mode", "interrupt")
    await store.set_conversation_setting(CHAT, "other", "x y: z")
    await store.set_conversation_setting(ODD, "busy_mode", "queue")
    assert await store.conversation_setting(CHAT, "busy_mode") == "steer"
    assert await store.conversation_setting(TOPIC, "busy_mode") == "interrupt"
    assert await store.conversation_setting(CHAT, "other") == "x y: z"
    assert await store.conversation_setting(ODD, "busy_mode") == "queue"
    assert await store.conversation_setting(ConversationKey("slack", "C", "1"), "busy_mode") is None


async def test_a_new_value_replaces_the_old_and_none_forgets_it(store: StateStore) -> None:
    await store.set_conversation_setting(CHAT, "busy_mode", "steer")
    await store.set_conversation_setting(CHAT, "busy_mode", "interrupt")
    assert await store.conversation_setting(CHAT, "busy_mode") == "interrupt"
    await store.set_conversation_setting(CHAT, "busy_mode", None)
    assert await store.conversation_setting(CHAT, "busy_mode") is None
    await store.set_conversation_setting(CHAT, "busy_mode", None)  # forgetting twice is fine
    assert await store.conversation_setting(CHAT, "busy_mode") is None


async def test_a_setting_outlives_the_store_object(backend: Backend) -> None:
    first = backend.open()
    try:
        await first.set_conversation_setting(TOPIC, "busy_mode", "steer")
    finally:
        await first.aclose()
    second = backend.open()
    try:
        assert await second.conversation_setting(TOPIC, "busy_mode") == "steer"
    finally:
        await second.aclose()


async def test_a_state_file_without_the_table_gains_it_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as raw:  # a file of the version before issue 24
        raw.executescript(
            "CREATE TABLE places (surface TEXT NOT NULL, chat TEXT NOT NULL,"
            " thread TEXT NOT NULL, project TEXT NOT NULL, PRIMARY KEY (surface, chat, thread));"
            "INSERT INTO places VALUES ('telegram', '1001', '', 'web');"
        )
    raw.close()
    store = SqliteStateStore(path)
    try:
        assert await store.get_place(CHAT) == "web"
        assert await store.conversation_setting(CHAT, "busy_mode") is None
        await store.set_conversation_setting(CHAT, "busy_mode", "interrupt")
    finally:
        await store.aclose()
    reopened = SqliteStateStore(path)
    try:
        assert await reopened.conversation_setting(CHAT, "busy_mode") == "interrupt"
    finally:
        await reopened.aclose()


async def test_the_outage_wrapper_passes_settings_through_and_names_an_outage(
    tmp_path: Path,
) -> None:
    server = RedisProcess(tmp_path, persistent=True)
    server.start()
    store = OutageTolerantStore(RedisStateStore(server.url), wait=0.2)
    try:
        await store.set_conversation_setting(CHAT, "busy_mode", "steer")
        assert await store.conversation_setting(CHAT, "busy_mode") == "steer"
        server.stop()
        with stamina.set_testing(True), pytest.raises(StoreUnavailable):
            await store.set_conversation_setting(CHAT, "busy_mode", None)
        server.start()  # the append-only file kept it
        assert await store.conversation_setting(CHAT, "busy_mode") == "steer"
        await store.set_conversation_setting(CHAT, "busy_mode", None)
        assert await store.conversation_setting(CHAT, "busy_mode") is None
    finally:
        await store.aclose()
        server.stop()
