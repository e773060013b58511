"""The store's table of each conversation's agent sessions (`session_history`): upserts keep the
first use and the latest title, the list is per conversation and project, most recent first, and
bounded; titles land wherever the session was recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.store import MAX_SESSION_HISTORY, SessionRecord, StateStore
from surfaces.base import ConversationKey
from tests.store_backends import Backend

pytestmark = pytest.mark.anyio

ALICE = ConversationKey("telegram", "1001", "")
BOB = ConversationKey("telegram", "1002", "")


def used(session_id: str, at: float, *, title: str = "", project: str = "default") -> SessionRecord:
    return SessionRecord(session_id, project, "kiro", "/srv/api", title, at, at)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StateStore]:
    """Every backend: the SQLite file and a real Redis server (tests/store_backends.py)."""
    s = backend.open()
    yield s
    await s.aclose()


async def test_a_session_used_again_keeps_its_first_use_and_its_title(
    store: StateStore,
) -> None:
    await store.history_record(ALICE, used("s1", 10.0, title="Fix login"))
    await store.history_record(ALICE, used("s2", 20.0))
    await store.history_record(ALICE, used("s1", 30.0))  # resumed: no title given this time
    (first, second) = await store.history_of(ALICE, "default")
    assert (first.session_id, first.title, first.created, first.last_used) == (
        "s1",
        "Fix login",
        10.0,
        30.0,
    )
    assert second.session_id == "s2"


async def test_titles_arrive_for_every_conversation_that_recorded_the_session(
    store: StateStore,
) -> None:
    await store.history_record(ALICE, used("s1", 10.0))
    await store.history_record(BOB, used("s1", 11.0))
    await store.history_title("s1", "Shared work")
    assert [r.title for r in await store.history_of(ALICE, "default")] == ["Shared work"]
    assert [r.title for r in await store.history_of(BOB, "default")] == ["Shared work"]
    assert set(await store.history_owners("s1")) == {ALICE, BOB}
    assert await store.history_owners("nobody's") == []


async def test_the_list_is_per_project_and_bounded_per_conversation(
    store: StateStore,
) -> None:
    for n in range(MAX_SESSION_HISTORY + 5):
        await store.history_record(ALICE, used(f"s{n}", float(n + 1)))
    await store.history_record(ALICE, used("web-1", 1000.0, project="web"))
    await store.history_record(BOB, used("b1", 1.0))
    kept = await store.history_of(ALICE, "default")
    assert len(kept) == MAX_SESSION_HISTORY - 1  # the web one counts towards the bound
    assert kept[0].session_id == f"s{MAX_SESSION_HISTORY + 4}"
    assert "s0" not in {r.session_id for r in kept}
    assert [r.session_id for r in await store.history_of(ALICE, "web")] == ["web-1"]
    assert [r.session_id for r in await store.history_of(BOB, "default")] == ["b1"]
