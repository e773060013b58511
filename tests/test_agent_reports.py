"""What agents report outside the answer (issue 24): Switchboard opts in at `initialize` as the v1
schema names it (`plan`, `subagents`, `session.compaction`, `session.notices`) and shows a
subagent session as its own block (its title, state and current tool: the child's updates arrive
under its own session id and are routed to the parent's turn), a notice as one line, a compaction
as "context compacted (N → M tokens)", identified plans replaced and removed. Hostile shapes are
skipped, strings clipped, counts bounded. Through the scripted agent (a real subprocess), the
engine's scripted surface and the Telegram fake with the real python-telegram-bot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpEvent, EventKind, SubagentReport
from acp.agent_reports import MAX_SUBAGENTS, SubagentRoutes
from bot.progress import TurnProgress
from surfaces.base import STATUS_MARK
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving
from tests.test_telegram import ALICE, api, settings_for, shows  # noqa: F401

WAIT = 30
CHILD = "sess_child_1"


def update(**fields: Any) -> dict[str, Any]:
    return {"update": fields}


def child(**fields: Any) -> dict[str, Any]:
    """A session/update under the subagent's own session id."""
    return {
        "notify": {"method": "session/update", "params": {"sessionId": CHILD, "update": fields}}
    }


ANNOUNCE = update(
    sessionUpdate="subagent_update",
    sessionId=CHILD,
    title="Test investigator",
    state={"state": "running"},
    capabilities={"cancel": {}},
)
CHILD_TOOL = child(
    sessionUpdate="tool_call",
    toolCallId="c1",
    title="Read file",
    kind="read",
    status="in_progress",
    rawInput={"path": "tests/test_a.py"},
)
CHILD_TEXT = child(
    sessionUpdate="agent_message_chunk", content={"type": "text", "text": "CHILD SECRET"}
)
NOTICE = update(
    sessionUpdate="notice",
    severity="warning",
    title="MCP server unavailable",
    description="Continuing without it.",
)
COMPACTION = [
    update(sessionUpdate="usage_update", used=80_000, size=200_000),
    update(sessionUpdate="compaction_update", compactionId="cmp_1", status="in_progress"),
    update(sessionUpdate="compaction_update", compactionId="cmp_1", status="completed"),
    update(sessionUpdate="usage_update", used=20_000, size=200_000),
]


def live_texts(surface: ScriptedSurface) -> list[str]:
    return [call.text for call in surface.ops("send", "edit") if not call.formatted]


# ---- the handshake and the routing ---------------------------------------------------------------
@pytest.mark.anyio
async def test_initialize_opts_in_as_the_v1_schema_names_it(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)):
            pass
    (frame,) = fake_agent.frames_in("initialize")
    capabilities = frame["params"]["clientCapabilities"]
    assert capabilities["plan"] == {} and capabilities["subagents"] == {}
    assert capabilities["session"] == {"compaction": {}, "notices": {}}


@pytest.mark.anyio
async def test_a_subagents_updates_reach_its_parents_turn_as_its_own(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    stray = {
        "notify": {
            "method": "session/update",
            "params": {"sessionId": "never-announced", "update": CHILD_TOOL["notify"]["params"]},
        }
    }
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            prompt = script(ANNOUNCE, CHILD_TOOL, CHILD_TEXT, stray, {"chunk": "parent answer"})
            events = await collect_turn(session, prompt)
    reports = [e.report for e in events if e.kind is EventKind.SUBAGENT]
    assert reports[0] == SubagentReport(
        CHILD, title="Test investigator", state="running", can_cancel=True
    )
    assert isinstance(reports[1], SubagentReport) and reports[1].session_id == CHILD
    assert reports[1].tool is not None and reports[1].tool.describe() == (
        "Read file (tests/test_a.py)"
    )
    assert len(reports) == 2  # the stray child of nobody is not shown
    assert "".join(texts(events)) == "parent answer"  # the child's words stay its own


def test_the_routes_are_bounded_and_never_forged_by_a_frame() -> None:
    routes = SubagentRoutes()
    for n in range(MAX_SUBAGENTS + 10):
        routes.announced(
            "parent", {"update": {"sessionUpdate": "subagent_update", "sessionId": f"c{n}"}}
        )
    assert routes.parent_of("c0") is None and routes.parent_of(f"c{MAX_SUBAGENTS + 9}") == "parent"
    routes.announced("parent", {"update": {"sessionUpdate": "subagent_update", "sessionId": 7}})
    routes.announced("parent", {"update": "subagent_update"})
    routed = routes.route("session/update", {"sessionId": "c40", "update": {"sessionUpdate": "x"}})
    assert routed is not None and routed[0] == "parent"
    # a JSON frame can never hold what the route wraps a child's update in
    assert not isinstance(routed[1]["update"], dict)
    assert routes.route("_kiro.dev/metadata", {"sessionId": "c40"}) is None


# ---- what the live status shows -------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_the_live_status_shows_subagents_notices_and_a_compaction(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script(
        ANNOUNCE,
        CHILD_TOOL,
        NOTICE,
        *COMPACTION,
        {"sleep": 0.4},
        {"chunk": "All done."},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    live = live_texts(surface)
    block = (
        f"{STATUS_MARK}working\n"
        "▸ subagent: Test investigator (running)\n"
        "↳ ▸ Read file (tests/test_a.py)\n"
        "⚠ MCP server unavailable — Continuing without it.\n"
        "context compacted (80,000 → 20,000 tokens)"
    )
    assert any(block in text for text in live), live
    final = list(surface.shown().values())[-1]
    assert final.startswith("All done.")
    assert "⚠ MCP server unavailable — Continuing without it." in final
    assert "context compacted (80,000 → 20,000 tokens)" in final
    assert "subagent" not in final and STATUS_MARK not in final


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_identified_plans_replace_and_remove_and_a_markdown_plan_is_a_checklist(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    items = {"type": "items", "id": "p1", "entries": [{"content": "Read", "status": "completed"}]}
    markdown = {"type": "markdown", "id": "p2", "content": "# Plan\n- [x] Read\n- [ ] Fix it\n"}
    steps = script(
        update(sessionUpdate="plan_update", plan=items),
        {"sleep": 0.4},
        update(sessionUpdate="plan_update", plan=markdown),
        {"sleep": 0.4},
        update(sessionUpdate="plan_removed", planId="p1"),  # not the plan shown: ignored
        {"sleep": 0.4},
        update(sessionUpdate="plan_removed", planId="p2"),
        update(sessionUpdate="notice", severity="info", title="Indexing"),
        {"sleep": 0.4},
        {"chunk": "ok"},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    live = live_texts(surface)
    assert any("Plan (1/1):\n✓ Read" in text for text in live), live
    assert any("Plan (1/2):\n✓ Read\n○ Fix it" in text for text in live), live
    assert any("ℹ Indexing" in text and "Plan" not in text for text in live), live
    assert "Indexing" not in list(surface.shown().values())[-1]  # an info notice is not kept


def test_hostile_reports_are_clipped_bounded_and_skipped() -> None:
    from acp._dispatch import parse_update

    def event(**fields: Any) -> AcpEvent | None:
        return parse_update({"sessionId": "s", "update": fields})

    long_title = event(sessionUpdate="notice", severity="warning", title="x\x00" * 5000)
    assert long_title is not None and isinstance(long_title.report, object)
    assert len(long_title.report.title) <= 200  # type: ignore[union-attr]
    assert event(sessionUpdate="notice", severity="warning", title=None) is None
    assert event(sessionUpdate="compaction_update", compactionId=3, status="completed") is None
    assert event(sessionUpdate="subagent_update", sessionId={"x": 1}) is None
    assert event(sessionUpdate="plan_update", plan={"type": "file", "id": "p"}) is None
    assert event(sessionUpdate="brand_new_variant", anything=True) is None
    assert event(sessionUpdate="compaction_summary_chunk", compactionId="c") is None
    markdown = event(
        sessionUpdate="plan_update",
        plan={"type": "markdown", "id": "p", "content": "- [ ] step\n" * 1000},
    )
    assert markdown is not None and len(markdown.plan) == 50

    progress = TurnProgress()
    for n in range(100):
        report = SubagentReport(f"c{n}", title=f"helper {n}", state="running")
        progress.on_event(AcpEvent(EventKind.SUBAGENT, report=report))
    for n in range(30):
        progress.on_event(event(sessionUpdate="notice", severity="error", title=f"n{n}"))  # type: ignore[arg-type]
    block = progress.block(0.0)
    assert block is not None and len(block.splitlines()) <= 19
    assert "… 30 more subagents" in block  # 32 tracked, the latest two shown
    assert len(progress.final_notes().splitlines()) == 5


# ---- Telegram ---------------------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_shows_a_subagent_a_notice_and_a_compaction(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    steps = script(
        ANNOUNCE, CHILD_TOOL, NOTICE, *COMPACTION, {"sleep": 1.5}, {"chunk": "Finished."}
    )
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        await wait_for(shows(api, ALICE.id, "Finished."), "the final", 20)
    drafts = [str(call.params.get("text", "")) for call in api.calls_to("sendMessageDraft")]
    assert any("subagent: Test investigator (running)" in d for d in drafts), drafts
    assert any("↳ ▸ Read file (tests/test_a.py)" in d for d in drafts), drafts
    final = api.chat_text(ALICE.id)
    assert "⚠ MCP server unavailable — Continuing without it." in final
    assert "context compacted (80,000 → 20,000 tokens)" in final


def test_a_notice_between_a_compaction_and_its_count_stays_in_the_final() -> None:
    from acp._dispatch import parse_update

    progress = TurnProgress()
    for fields in (
        {"sessionUpdate": "usage_update", "used": 9000, "size": 10000},
        {"sessionUpdate": "compaction_update", "compactionId": "c", "status": "in_progress"},
        {"sessionUpdate": "compaction_update", "compactionId": "c", "status": "completed"},
        {"sessionUpdate": "notice", "severity": "error", "title": "Provider degraded"},
        {"sessionUpdate": "usage_update", "used": 1000, "size": 10000},
    ):
        parsed = parse_update({"sessionId": "s", "update": fields})
        assert parsed is not None
        progress.on_event(parsed)
    assert progress.final_notes() == (
        "context compacted (9,000 → 1,000 tokens)\n✗ Provider degraded"
    )
