"""The operations view over real HTTP: `BotApp` with the scripted fake agent hands the dashboard
its snapshot and actions (`set_operations`); the dashboard's routes on aiohttp's test server; a
person signed in as in tests/test_dashboard.py. Also the faults ring of bot/faults.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bot.app import BotApp
from bot.faults import RECENT_FAULTS, log_fault, recent_faults
from bot.ops_view import AUDIT_SHOWN
from bot.store import AuditRecord
from surfaces.base import ConversationKey
from surfaces.dashboard.adapter import DashboardSurface
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, running_app, wait_for
from tests.test_dashboard import ACCESS, agent_html, origin, page, served, signed_in

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

Client = TestClient[Any, Any]


@asynccontextmanager
async def operating(tmp_path: Path, fake_agent: FakeAgent) -> AsyncIterator[tuple[BotApp, Client]]:
    settings = engine_settings(tmp_path, fake_agent, dashboard=ACCESS)
    surface = DashboardSurface(settings.dashboard, min_edit_interval=0.01)
    async with running_app(settings, surface) as app, served(surface) as client:  # type: ignore[arg-type]  # any Surface serves
        yield app, client


async def snapshot(client: Client, csrf: str) -> dict[str, Any]:
    answer = await client.get("/api/ops", headers={"X-CSRF-Token": csrf})
    assert answer.status == 200, await answer.text()
    body: dict[str, Any] = await answer.json()
    return body


async def act(client: Client, csrf: str, action: str, target: str) -> str:
    answer = await client.post(
        "/api/ops/action",
        json={"action": action, "target": target},
        headers={**origin(client), "X-CSRF-Token": csrf},
    )
    assert answer.status == 200, await answer.text()
    return str((await answer.json())["said"])


async def test_only_admins_get_the_operations_view(tmp_path: Path, fake_agent: FakeAgent) -> None:
    async with operating(tmp_path, fake_agent) as (_, client):
        assert (await client.get("/api/ops")).status == 401  # signed out
        csrf = await signed_in(client, "alice")
        probe = await (await client.get("/api/session")).json()
        assert probe["admin"] is False  # the page shows her no link
        refused = await client.get("/api/ops", headers={"X-CSRF-Token": csrf})
        assert refused.status == 403
        assert (await refused.json())["error"].startswith("Only an admin")
        action = await client.post(
            "/api/ops/action",
            json={"action": "stop-agent", "target": "1"},
            headers={**origin(client), "X-CSRF-Token": csrf},
        )
        assert action.status == 403
        root = await signed_in(client, "root")
        assert (await (await client.get("/api/session")).json())["admin"] is True
        assert (await client.get("/api/ops")).status == 403  # no CSRF token
        no_origin = await client.post(
            "/api/ops/action",
            json={"action": "stop-agent", "target": "1"},
            headers={"X-CSRF-Token": root},
        )
        assert no_origin.status == 403
        assert (await snapshot(client, root))["agents"] == []


async def test_a_running_turn_is_listed_and_an_admin_stops_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with operating(tmp_path, fake_agent) as (app, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, script({"chunk": "working on it"}, {"hang": True}))
        await alice.until(lambda f: agent_html(f) and "working on it" in f["html"], "the stream")
        csrf = await signed_in(client, "root")
        seen = await snapshot(client, csrf)
        [agent] = seen["agents"]
        assert agent["project"] == "default" and agent["agent"] and agent["sessions"] == 1
        assert agent["pid"] > 0 and agent["rss"] > 0
        [turn] = [c for c in seen["conversations"] if c["turn"]]
        assert turn["conversation"] == f"dashboard:alice/{tab}"
        assert turn["state"] == "answering" and turn["agent_pid"] == agent["pid"]
        assert {"name": "dashboard", "connected": True} in seen["surfaces"]
        assert seen["replica"] == {"id": app.replica, "alive": [app.replica]}  # one process
        said = await act(client, csrf, "stop-turn", turn["conversation"])
        assert said == f"The turn in {turn['conversation']} was stopped."
        await alice.until(
            lambda f: agent_html(f) and "The turn was stopped." in f["html"], "stopped"
        )
        assert len(fake_agent.frames_in("session/cancel")) == 1
        await wait_for(lambda: not app.runners[turn_key(tab)].running, "the turn over")
        assert await act(client, csrf, "stop-turn", turn["conversation"]) == (
            "That conversation has no turn running."
        )
        audit = (await snapshot(client, csrf))["audit"]
        assert audit[0]["action"] == "stop-turn" and audit[0]["actor"] == "root"
        assert audit[0]["conversation"] == turn["conversation"]


def turn_key(tab: str) -> ConversationKey:
    return ConversationKey("dashboard", "alice", tab)


async def test_an_admin_stops_an_agent_and_the_conversation_resumes_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with operating(tmp_path, fake_agent) as (app, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, "one")
        await alice.until(lambda f: agent_html(f) and "Echo: one" in f["html"], "the answer")
        csrf = await signed_in(client, "root")
        [agent] = (await snapshot(client, csrf))["agents"]
        said = await act(client, csrf, "stop-agent", str(agent["pid"]))
        assert said == f"The agent (pid {agent['pid']}) was stopped."
        assert (await snapshot(client, csrf))["agents"] == []
        assert await act(client, csrf, "stop-agent", str(agent["pid"])) == (
            "That agent is not running any more."
        )
        await alice.send(tab, "two")
        await alice.until(lambda f: agent_html(f) and "Echo: two" in f["html"], "answered again")
        assert len(fake_agent.frames_in("session/load")) == 1  # resumed, not a new session
        [again] = (await snapshot(client, csrf))["agents"]
        assert again["pid"] != agent["pid"]
        records = [r for r in await app.store.audit_since(0.0) if r.kind == "admin"]
        assert [(r.actor, r.action, r.details) for r in records] == [
            ("root", "stop-agent", {"pid": str(agent["pid"])})
        ]


def test_the_faults_ring_is_bounded_newest_first_and_redacted() -> None:
    recent_faults.clear()
    key = ConversationKey("telegram", "42")
    secret = "sk-ant-" + "x" * 30
    try:
        for number in range(RECENT_FAULTS + 20):
            try:
                raise RuntimeError(f"fault {number}")
            except RuntimeError as exc:
                log_fault(exc, "handling an event", key, None, event=f"e{number} token={secret}")
        faults = recent_faults.latest()
        assert len(faults) == RECENT_FAULTS
        assert faults[0].crumbs["event"].startswith(f"e{RECENT_FAULTS + 19} ")
        assert faults[-1].crumbs["event"].startswith("e20 ")
        newest = faults[0].as_json()
        assert newest["error"] == "RuntimeError" and newest["conversation"] == "telegram:42"
        assert str(newest["told"]).startswith("Something went wrong on Switchboard's side")
        assert secret not in str(newest) and "[redacted]" in str(newest)
    finally:
        recent_faults.clear()


async def test_uptime_is_the_agent_process_s_own_not_when_the_view_first_saw_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with operating(tmp_path, fake_agent) as (app, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, "one")
        await alice.until(lambda f: agent_html(f) and "Echo: one" in f["html"], "the answer")
        [runtime] = app.agents.runtimes()
        runtime.started_at -= 1000.0  # as if spawned long before anyone looked
        csrf = await signed_in(client, "root")
        [agent] = (await snapshot(client, csrf))["agents"]
        assert agent["pid"] == runtime.pid and agent["uptime"] >= 1000.0


async def test_the_audit_is_read_bounded_newest_first(
    tmp_path: Path, fake_agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with operating(tmp_path, fake_agent) as (app, client):
        for number in range(AUDIT_SHOWN + 30):
            record = AuditRecord(1000.0 + number, "admin", "dashboard", "root", f"a{number}", {})
            await app.store.audit_put(record, keep=1e12)
        latest = await app.store.audit_latest(AUDIT_SHOWN)
        assert [r.action for r in latest] == [f"a{n}" for n in reversed(range(30, 130))]
        assert await app.store.audit_latest(0) == []

        async def whole_log(since: float) -> list[AuditRecord]:
            raise AssertionError("the snapshot read the whole audit log")

        monkeypatch.setattr(app.store, "audit_since", whole_log)
        csrf = await signed_in(client, "root")
        audit = (await snapshot(client, csrf))["audit"]
        assert len(audit) == AUDIT_SHOWN and audit[0]["action"] == f"a{AUDIT_SHOWN + 29}"


async def test_a_fault_with_an_agent_carries_its_stderr_tail_redacted(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    recent_faults.clear()
    secret = "sk-ant-" + "y" * 30
    try:
        async with operating(tmp_path, fake_agent) as (app, client), page(client, "alice") as alice:
            tab = alice.tabs()[0]
            said = f"agent trouble token={secret}\n"
            await alice.send(tab, script({"stderr": said}, {"chunk": "done"}))
            await alice.until(lambda f: agent_html(f) and "done" in f["html"], "the answer")
            [runtime] = app.agents.runtimes()
            await wait_for(lambda: "agent trouble" in runtime.stderr.text(), "the stderr line")
            try:
                raise RuntimeError("a bug")
            except RuntimeError as exc:
                app.runners[turn_key(tab)].log_fault(exc, "answering")
            csrf = await signed_in(client, "root")
            [fault] = (await snapshot(client, csrf))["faults"]
            assert fault["conversation"] == f"dashboard:alice/{tab}"
            assert f"agent_pid={runtime.pid}" in fault["crumbs"]["agent"]
            assert "agent trouble token=" in fault["stderr_tail"]
            assert secret not in str(fault) and "[redacted]" in fault["stderr_tail"]
    finally:
        recent_faults.clear()


async def test_a_conversation_waiting_for_approval_and_the_approvals_pending(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with operating(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, "SCN_PERMISSION")
        choice = await alice.until(lambda f: f.get("kind") == "choice", "the approval")
        csrf = await signed_in(client, "root")
        seen = await snapshot(client, csrf)
        conversation = f"dashboard:alice/{tab}"
        [row] = [c for c in seen["conversations"] if c["conversation"] == conversation]
        assert row["state"] == "waiting for approval"
        assert seen["approvals"] == [
            {"conversation": conversation, "requester": "alice", "tool": "Run echo hi"}
        ]
        yes = next(b for b in choice["buttons"] if b["label"] == "Yes")
        await alice.socket.send_json({"type": "press", "tab": tab, "token": yes["token"]})
        await alice.until(lambda f: agent_html(f) and "permission:allow_once" in f["html"], "yes")
        assert (await snapshot(client, csrf))["approvals"] == []


async def test_stopping_an_agent_while_its_turn_runs_ends_the_turn_and_the_next_resumes(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with operating(tmp_path, fake_agent) as (app, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, script({"chunk": "working on it"}, {"hang": True}))
        await alice.until(lambda f: agent_html(f) and "working on it" in f["html"], "the stream")
        csrf = await signed_in(client, "root")
        [agent] = (await snapshot(client, csrf))["agents"]
        assert await act(client, csrf, "stop-agent", str(agent["pid"])) == (
            f"The agent (pid {agent['pid']}) was stopped."
        )
        await alice.until(
            lambda f: agent_html(f) and "The turn was stopped." in f["html"], "stopped"
        )
        await wait_for(lambda: not app.runners[turn_key(tab)].running, "the turn over")
        await alice.send(tab, "two")
        await alice.until(lambda f: agent_html(f) and "Echo: two" in f["html"], "answered again")
        assert len(fake_agent.frames_in("session/load")) == 1  # resumed, not a new session


async def test_a_surface_that_is_not_connected_is_shown_so(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent, dashboard=ACCESS)
    surface = DashboardSurface(settings.dashboard, min_edit_interval=0.01)
    offline = ScriptedSurface("telegram")
    offline.connected = False  # type: ignore[attr-defined]  # it reports its connection
    async with (
        running_app(settings, surface, offline) as _,  # type: ignore[arg-type]  # any Surface serves
        served(surface) as client,
    ):
        csrf = await signed_in(client, "root")
        surfaces = (await snapshot(client, csrf))["surfaces"]
        assert {"name": "telegram", "connected": False} in surfaces
        assert {"name": "dashboard", "connected": True} in surfaces
