"""The audit log (bot/audit.py): approvals answered, a refused approver, a stranger, an admin's
bind and a non-admin's attempt, a Stop pressed by someone else; each in the store and as one JSON
log line, without message text; pruned after SWITCHBOARD_AUDIT_DAYS; `switchboard audit --since`."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.audit import BadSince, parse_since
from bot.store import AuditRecord, open_store
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    Call,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.store_backends import Backend
from tests.test_stop_button import stop_button

pytestmark = pytest.mark.usefixtures("clean_env")

DAY = 86400.0


def audit_settings(tmp_path: Path, fake_agent: FakeAgent) -> Any:
    return engine_settings(
        tmp_path,
        fake_agent,
        telegram={"allowed_users": ["alice", "bob"], "approvers": ["carol"], "admins": ["dave"]},
    )


async def records(state: str) -> list[dict[str, object]]:
    store = open_store(state)
    try:
        return [record.as_json() for record in await store.audit_since(0)]
    finally:
        await store.aclose()


def _token(call: Call, label: str) -> str:
    return next(choice.token for choice in call.choices if choice.label == label)


@pytest.mark.anyio
async def test_an_approval_and_a_refused_approver_are_audited_without_message_text(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchboard.audit")
    settings = audit_settings(tmp_path, fake_agent)
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        turn = surface.post(surface.message("alice", "SCN_PERMISSION"))
        await wait_for(surface.choices, "the approval prompt")
        choice = surface.choices()[0]
        await finished(surface.post(surface.press("bob", _token(choice, "Yes"))))
        await finished(surface.post(surface.press("alice", _token(choice, "Yes"))))
        await finished(turn)
    found = await records(settings.state)
    assert [(r["kind"], r["actor"], r["action"]) for r in found] == [
        ("refused", "bob", "approval"),
        ("approval", "alice", "approval"),
    ]
    refused, approval = found
    assert refused["requester"] == "alice" and refused["surface"] == "telegram"
    assert approval["requester"] == "alice"
    assert approval["tool"] == "Run echo hi execute"
    assert approval["outcome"] == "allow_once"
    assert isinstance(approval["at"], float) and abs(approval["at"] - time.time()) < 600
    assert "SCN_PERMISSION" not in json.dumps(found)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "switchboard.audit"]
    assert lines == found  # one JSON line per record, the same data


@pytest.mark.anyio
async def test_an_unanswered_approval_is_audited_as_timed_out(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = audit_settings(tmp_path, fake_agent).model_copy(update={"approval_timeout": 0.2})
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "SCN_PERMISSION")))
    found = await records(settings.state)
    assert [(r["kind"], r.get("actor"), r["outcome"]) for r in found] == [
        ("approval", "", "timed out, rejected")
    ]


@pytest.mark.anyio
async def test_a_stranger_is_audited_once_however_much_they_write(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = audit_settings(tmp_path, fake_agent)
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        for text in ("hello?", "anyone there", "my secret plan"):
            await finished(surface.post(surface.message("mallory", text)))
    found = await records(settings.state)
    assert found == [
        {
            "at": found[0]["at"],
            "kind": "refused",
            "surface": "telegram",
            "actor": "mallory",
            "action": "stranger",
            "event": "message",
        }
    ]


@pytest.mark.anyio
async def test_an_admins_bind_is_audited_and_a_non_admins_attempt_is_refused(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = audit_settings(tmp_path, fake_agent)
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "/project bind default")))
        await finished(surface.post(surface.message("dave", "/project bindchat default")))
    assert "Only an admin can bind" in surface.transcript()
    found = await records(settings.state)
    assert [(r["kind"], r["actor"], r["action"], r["project"]) for r in found] == [
        ("refused", "alice", "project bind", "default"),
        ("admin", "dave", "project bindchat", "default"),
    ]
    assert found[1]["place"] == str(CHAT)


@pytest.mark.anyio
async def test_a_stop_pressed_by_someone_else_is_audited(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = audit_settings(tmp_path, fake_agent)
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(settings, surface):
        hanging = script({"chunk": "working on it"}, {"hang": True})
        turn = surface.post(surface.message("alice", hanging))
        await wait_for(lambda: stop_button(surface) is not None, "the Stop button")
        stop = stop_button(surface)
        assert stop is not None
        await finished(surface.post(surface.press("bob", stop.token)))
        await finished(surface.post(surface.press("alice", stop.token)), turn)
    found = await records(settings.state)
    assert [(r["kind"], r["actor"], r["action"], r["requester"]) for r in found] == [
        ("refused", "bob", "stop", "alice")
    ]


@pytest.mark.anyio
async def test_records_older_than_the_kept_days_are_pruned(backend: Backend) -> None:
    now = [1_000 * DAY]
    store = backend.open(clock=lambda: now[0])  # SQLite and a real Redis server
    try:
        old = AuditRecord(now[0] - 91 * DAY, "admin", "telegram", "dave", "project bind", {})
        kept = AuditRecord(now[0] - 89 * DAY, "admin", "telegram", "dave", "project bind", {})
        await store.audit_put(old, 365 * DAY)
        await store.audit_put(kept, 365 * DAY)
        fresh = AuditRecord(now[0], "refused", "slack", "U1", "stranger", {"event": "message"})
        await store.audit_put(fresh, 90 * DAY)
        assert await store.audit_since(0) == [kept, fresh]
        assert await store.audit_since(now[0] - DAY) == [fresh]
        assert await store.audit_latest(1) == [fresh]
        assert await store.audit_latest(5) == [fresh, kept]
        assert await store.audit_latest(0) == []
    finally:
        await store.aclose()


# ---- switchboard audit --since ----------------------------------------------------------------


def test_since_reads_dates_times_and_durations() -> None:
    now = datetime(2026, 12, 10, 12, 0, tzinfo=UTC).timestamp()
    assert parse_since("2026-12-01", now) == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert (
        parse_since("2026-12-01T08:30", now) == datetime(2026, 12, 1, 8, 30, tzinfo=UTC).timestamp()
    )
    assert (
        parse_since("2026-12-01T08:30+01:00", now)
        == datetime(2026, 12, 1, 7, 30, tzinfo=UTC).timestamp()
    )
    assert parse_since("2h", now) == now - 7200
    assert parse_since("30m", now) == now - 1800
    assert parse_since("7d", now) == now - 7 * DAY
    for bad in ("yesterday", "-2h", "h", "2026-13-01"):
        with pytest.raises(BadSince):
            parse_since(bad, now)


def _write(state: Path, *entries: AuditRecord) -> None:
    async def main() -> None:
        store = open_store(str(state))
        try:
            for entry in entries:
                await store.audit_put(entry, 3650 * DAY)
        finally:
            await store.aclose()

    anyio.run(main)


def test_switchboard_audit_prints_the_records_since_as_json_lines(
    run_cli: Any, tmp_path: Path
) -> None:
    now = time.time()
    november = datetime(2026, 11, 20, tzinfo=UTC).timestamp()
    _write(
        tmp_path / "state.db",
        AuditRecord(november, "admin", "telegram", "dave", "project bind", {"project": "web"}),
        AuditRecord(now - 5 * 3600, "refused", "telegram", "mallory", "stranger", {}),
        AuditRecord(now - 60, "approval", "slack", "U2", "approval", {"outcome": "allow_once"}),
    )
    recent = run_cli("audit", "--since", "2h")
    assert recent.returncode == 0, recent.stderr
    lines = [json.loads(line) for line in recent.stdout.splitlines()]
    assert [(line["actor"], line["outcome"]) for line in lines] == [("U2", "allow_once")]
    assert lines[0]["time"] == datetime.fromtimestamp(lines[0]["at"], UTC).isoformat()
    since_date = run_cli(
        "audit", "--since", datetime.fromtimestamp(now - 6 * 3600, UTC).isoformat()
    )
    assert [json.loads(line)["actor"] for line in since_date.stdout.splitlines()] == [
        "mallory",
        "U2",
    ]
    everything = run_cli("audit")
    assert len(everything.stdout.splitlines()) == 3
    bad = run_cli("audit", "--since", "last week")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.strip() == (
        "--since 'last week' is neither a date (2026-12-01, 2026-12-01T08:00) nor a "
        "duration (30m, 2h, 7d)"
    )


@pytest.mark.anyio
async def test_a_project_refused_is_audited(tmp_path: Path, fake_agent: FakeAgent) -> None:
    settings = engine_settings(
        tmp_path,
        fake_agent,
        telegram={"allowed_users": ["alice", "bob"]},
        projects={"web": {"workspace": str(tmp_path), "users": ["telegram:bob"]}},
    )
    surface = ScriptedSurface()
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "a secret question")))
    assert "a project you may not use" in surface.transcript()
    found = await records(settings.state)
    assert [(r["kind"], r["actor"], r["action"], r["project"]) for r in found] == [
        ("refused", "alice", "project", "web")
    ]
    assert "secret" not in json.dumps(found)
