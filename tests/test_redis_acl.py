"""deploy/compose.yaml's Redis ACL is enough for Switchboard and no more: a real redis-server
started with the ACL rules that file gives the redis service (the default user off, the user
`switchboard` on `~switchboard:*` with a few command categories) serves two replicas through a
relayed message, an approval pressed on the other replica, start-up's look for approvals left
behind and the store's calls; the same user cannot touch another key or administer the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from bot.store import ApprovalRecord, AuditRecord, DeliveryEntry, JournalEntry, SessionRecord
from surfaces.base import ConversationKey
from tests.conftest import ROOT, FakeAgent
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.store_backends import RedisProcess
from tests.test_engine import permission_outcomes, sends

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PASSWORD = "acl-test-password-Zq81"


def compose_acl() -> list[str]:
    """The redis service's `--user` directives, its password filled in as compose would."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    command: list[str] = compose["services"]["redis"]["command"]
    rules = command[command.index("--user") :]
    return [rule.split("${")[0] + PASSWORD if "${" in rule else rule for rule in rules]


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(
        tmp_path, args=compose_acl(), client_args={"username": "switchboard", "password": PASSWORD}
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _url(server: RedisProcess) -> str:
    return f"redis://switchboard:{PASSWORD}@127.0.0.1:{server.port}/0"


async def test_two_replicas_relay_and_answer_an_approval_as_the_acl_user(
    tmp_path: Path, fake_agent: FakeAgent, acl_redis: RedisProcess
) -> None:
    here, there = ScriptedSurface(), ScriptedSurface()
    url = _url(acl_redis)
    settings_a = engine_settings(tmp_path, fake_agent, state=url, replica_id="a")
    settings_b = engine_settings(tmp_path, fake_agent, state=url, replica_id="b")
    async with running_app(settings_a, here) as a, running_app(settings_b, there):
        turn = here.post(here.message("alice", "SCN_PERMISSION", event_id="u-1"))
        await wait_for(here.choices, "the approval prompt")
        # what start-up scans for: the agent's three options and the Trust button
        assert len(await a.store.approvals_pending()) == 4
        token = next(c.token for c in here.choices()[0].choices if c.label == "Yes")
        await finished(there.post(there.press("alice", token, event_id="p-1", key=CHAT)))
        await finished(turn)
        await finished(there.post(there.message("alice", "hello", event_id="u-2")))
        await wait_for(lambda: sends(here, "Echo: hello"), "the relayed message's reply")
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    assert [c.text for c in here.ops("close_choice")] == ["Answered: Yes"]
    with acl_redis.raw() as raw:
        assert raw.dbsize() > 0 and all(k.startswith("switchboard:") for k in raw.scan_iter())


async def test_every_store_call_works_as_the_acl_user(
    tmp_path: Path, fake_agent: FakeAgent, acl_redis: RedisProcess
) -> None:
    settings = engine_settings(tmp_path, fake_agent, state=_url(acl_redis), replica_id="a")
    async with running_app(settings, ScriptedSurface()) as app:
        store = app.store
        key = ConversationKey("telegram", "9")
        await store.check_writable()
        assert await store.claim_event("telegram:1", 60)
        await store.put_approvals([ApprovalRecord("t", "g", "o", "alice", key, 1.0, "a")], 60)
        await store.approval_shown("g", "77")
        assert (await store.approvals_pending())[0].message == "77"
        await store.drop_approvals("g")
        await store.put_place(key, "default")
        assert await store.get_place(key) == "default"
        await store.delete_place(key)
        await store.journal_open(JournalEntry("turn-1", key, "alice", 1.0, "a"), 60)
        await store.ledger_put(
            DeliveryEntry("e-1", key, "hi", 1.0, replica="a"), closes_turn="turn-1"
        )
        await store.ledger_attempted("e-1")
        await store.ledger_done("e-1")
        assert await store.journal_open_turns() == [] and await store.ledger_pending() == []
        await store.history_record(key, SessionRecord("s-1", "default", "kiro", "/w"))
        await store.history_title("s-1", "a title")
        assert [r.title for r in await store.history_of(key, "default")] == ["a title"]
        assert await store.history_owners("s-1") == [key]
        await store.audit_put(AuditRecord(1.0, "admin", "telegram", "alice", "x", {}), 3600)
        assert await store.audit_latest(5) and await store.audit_since(0)


def test_the_acl_user_reaches_nothing_else(acl_redis: RedisProcess) -> None:
    with acl_redis.raw() as raw:
        for refused in (
            lambda: raw.set("other:key", "x"),
            lambda: raw.flushall(),
            lambda: raw.config_get("dir"),
            lambda: raw.acl_list(),
            lambda: raw.keys("*"),
            lambda: raw.publish("channel", "x"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                refused()
    anonymous = redis.Redis(host="127.0.0.1", port=acl_redis.port)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("switchboard:meta:checked")
    finally:
        anonymous.close()
