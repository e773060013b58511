"""A full state store (issue 21, "faults that still tell"): the SQLite state file on a small real
tmpfs that a filler file fills until the kernel says ENOSPC, under a serving BotApp on the fake
agent (with the in-process surface, and with the real Telegram adapter polling the fake Bot API). A message that arrives then is not sent to the agent and its sender is told so in one
sentence that never goes through the delivery ledger (which cannot be written); a reply being
written when the disk fills still reaches the person; the operator gets one ERROR line, however
many messages meet the full disk. Redis out of memory is the same fault, mapped at its edge."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.faults import store_full_sentence
from bot.store import DeliveryEntry, StoreFull, open_store
from bot.store.redis import RedisStateStore
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.telegram import ids, serving, telegram_settings
from tests.store_backends import RedisProcess

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

DISK_FULL = (
    "Switchboard cannot save its state right now (the disk is full); "
    "your message was not sent to the agent."
)


class SmallDisk:
    """A 2 MB tmpfs of the test's own; `fill()` takes every free byte, `make_room()` frees it."""

    def __init__(self, where: Path) -> None:
        self.path = where
        self.filler = where / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * 4096
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    if len(block) == 1:
                        return
                    block = block[: len(block) // 2]  # the last few bytes too
        finally:
            os.close(fd)

    def make_room(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    where = tmp_path / "small-disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.fail(
            "these tests mount a small tmpfs to fill its disk, which needs root (or CAP_SYS_ADMIN):"
            f" mount said {mounted.stderr.strip()!r}"
        )
    try:
        yield SmallDisk(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_messages_on_a_full_disk_are_told_directly_and_the_operator_gets_one_error(
    small_disk: SmallDisk, tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    settings = engine_settings(tmp_path, fake_agent, state=str(small_disk.path / "state.db"))
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "before")))
        assert "Echo: before" in surface.transcript()
        small_disk.fill()
        for n in range(3):
            await finished(surface.post(surface.message("alice", f"while full {n}")))
        for user in ("alice", "bob"):  # another conversation's messages alike
            key = ConversationKey("telegram", f"chat-{user}")
            await finished(surface.post(surface.message(user, "elsewhere", key=key)))
        told = [call.text for call in surface.ops("send", "edit") if call.text == DISK_FULL]
        assert len(told) == 5
        assert not [text for text in fake_agent.prompt_texts() if "full" in text]
        assert "elsewhere" not in fake_agent.prompt_texts()
        lines = errors(caplog)
        assert len(lines) == 1, lines
        assert "cannot be written (the disk is full" in lines[0]
        assert "Traceback" not in caplog.text
        small_disk.make_room()
        await finished(surface.post(surface.message("alice", "after")))
        assert "Echo: after" in surface.transcript()
    assert fake_agent.prompt_texts() == ["before", "after"]


async def test_a_telegram_dm_on_a_full_disk_gets_the_sentence_in_its_chat(
    small_disk: SmallDisk, tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    alice = People().alice
    async with FakeBotApi() as api:
        state = str(small_disk.path / "state.db")
        access = {"allowed_users": ids(alice)}
        settings = telegram_settings(tmp_path, fake_agent, api, state=state, telegram=access)
        async with serving(settings):
            api.dm(alice, "before")
            await wait_for(lambda: "Echo: before" in api.chat_text(alice.id), "the reply", 20)
            caplog.set_level(logging.WARNING)
            small_disk.fill()
            api.dm(alice, "while full")
            api.dm(alice, "still full")
            await wait_for(
                lambda: api.chat_text(alice.id).count(DISK_FULL) == 2, "the two sentences", 20
            )
            assert len(errors(caplog)) == 1, errors(caplog)
    assert fake_agent.prompt_texts() == ["before"]


async def test_a_reply_being_written_when_the_disk_fills_still_reaches_the_person(
    small_disk: SmallDisk, tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    settings = engine_settings(tmp_path, fake_agent, state=str(small_disk.path / "state.db"))
    surface = ScriptedSurface()
    slow = script({"chunk": "working "}, {"sleep": 1.0}, {"chunk": "done"})
    async with running_app(settings, surface) as app:
        turn = surface.post(surface.message("alice", slow))
        await wait_for(lambda: "working" in surface.transcript(), "the turn to stream")
        small_disk.fill()
        await finished(turn)
        assert "working done" in surface.transcript()
        assert DISK_FULL not in surface.transcript()  # it was sent to the agent, and answered
        lines = errors(caplog)
        assert len(lines) == 1, lines
        assert "while recording a reply" in lines[0]
        small_disk.make_room()
        assert await app.store.ledger_pending() == []  # nothing recorded to re-send later


async def test_sqlite_disk_full_is_store_full_at_the_stores_edge(
    small_disk: SmallDisk,
) -> None:
    store = open_store(str(small_disk.path / "state.db"))
    try:
        await store.check_writable()
        small_disk.fill()
        entry = DeliveryEntry("e-1", ConversationKey("telegram", "c"), "x" * 20000, time.time())
        with pytest.raises(StoreFull) as caught:
            await store.ledger_put(entry)
        assert caught.value.room == "the disk is full"
        assert "database or disk is full" in caught.value.reason
        assert await store.ledger_pending() == []  # reading still works
    finally:
        await store.aclose()


async def test_redis_out_of_memory_is_store_full_with_its_own_words(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path)
    server.start()
    store = RedisStateStore(server.url)
    try:
        await store.check_writable()
        with server.raw() as raw:
            raw.config_set("maxmemory", "1")
        entry = DeliveryEntry("e-1", ConversationKey("telegram", "c"), "text", time.time())
        with pytest.raises(StoreFull) as caught:
            await store.ledger_put(entry)
        assert caught.value.room == "the Redis server is out of memory"
        assert store_full_sentence(caught.value) == (
            "Switchboard cannot save its state right now (the Redis server is out of memory); "
            "your message was not sent to the agent."
        )
    finally:
        await store.aclose()
        server.stop()
