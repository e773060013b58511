"""Visible progress, end to end through the engine and the fake agent: the plan and tool calls in
the live message, the elapsed-time tick, the tools summary the final keeps (and its setting), the
context and cost footer with its /compact suggestions, and the agent's commands in the surface's
own menu."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import bot.progress
from acp import AcpEvent, EventKind, PlanEntry, TerminalActivity, ToolCall, UsageInfo
from bot.notices import usage_footer
from bot.progress import TurnProgress
from surfaces.base import STATUS_MARK, MenuCommand
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PLAN = {
    "sessionUpdate": "plan",
    "entries": [
        {"content": "Read the parser", "status": "completed", "priority": "high"},
        {"content": "Fix the off-by-one", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending", "priority": "medium"},
    ],
}


def tool(call_id: str, title: str, kind: str, status: str = "in_progress", **raw: str) -> dict:
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": title,
        "kind": kind,
        "status": status,
    }
    if raw:
        update["rawInput"] = raw
    return {"update": update}


def done(call_id: str) -> dict:
    update = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"}
    return {"update": update}


def usage(used: int, size: int = 100) -> dict:
    return {"update": {"sessionUpdate": "usage_update", "used": used, "size": size}}


def live_texts(surface: ScriptedSurface) -> list[str]:
    return [call.text for call in surface.ops("send", "edit") if not call.formatted]


def final_text(surface: ScriptedSurface) -> str:
    return list(surface.shown().values())[-1]


# ---- the live message -------------------------------------------------------------------------
async def test_tool_calls_show_in_the_live_message_and_the_final_keeps_a_summary(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script(
        {"chunk": "Looking."},
        tool("t1", "Read file", "read", path="src/a.py"),
        {"sleep": 0.3},
        done("t1"),
        tool("t2", "Search", "search", query="parse_line"),
        {"sleep": 0.3},
        done("t2"),
        tool("t3", "Read file", "read", path="src/b.py"),
        done("t3"),
        {"chunk": " Found it."},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    live = live_texts(surface)
    assert f"Looking.\n\n{STATUS_MARK}working\n▸ Read file (src/a.py)" in live
    assert any("✓ Read file (src/a.py)\n▸ Search (parse_line)" in text for text in live)
    final = final_text(surface)
    assert final == "Looking. Found it.\n\nTools: 2 reads, 1 search"
    assert STATUS_MARK not in final


async def test_only_the_last_tool_calls_are_listed_with_a_count_of_the_earlier(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    calls = [tool(f"t{n}", f"Read f{n}.py", "read") for n in range(1, 9)]
    steps = script({"chunk": "Reading."}, *calls, {"sleep": 5})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", steps))
        await wait_for(
            lambda: any("▸ Read f8.py" in text for text in live_texts(surface)), "the 8th call"
        )
        status = live_texts(surface)[-1].split(STATUS_MARK, 1)[1]
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    assert status.splitlines() == [
        "working",
        "… 3 earlier",
        *(f"▸ Read f{n}.py" for n in range(4, 9)),
    ]


async def test_the_plan_shows_as_a_checklist_in_the_live_message(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script({"chunk": "On it."}, {"update": PLAN}, {"sleep": 0.3}, {"chunk": " Done."})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    checklist = (
        f"On it.\n\n{STATUS_MARK}working\nPlan (1/3):\n"
        "✓ Read the parser\n▸ Fix the off-by-one\n○ Run the tests"
    )
    assert checklist in live_texts(surface)
    assert final_text(surface) == "On it. Done."


async def test_a_quiet_turn_shows_how_long_it_has_been_working(
    tmp_path: Path, fake_agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bot.progress, "ELAPSED_AFTER", 0.0)
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        app.conversations.runner(
            surface, CHAT
        ).tick_interval = 0.05  # the knob: ticks without waiting 20 s
        turn = surface.post(
            surface.message("alice", script({"chunk": "Thinking."}, {"hang": True}))
        )
        # Nothing but the tick changes the text after the chunk.
        await wait_for(
            lambda: any(
                f"Thinking.\n\n{STATUS_MARK}still working (" in t for t in live_texts(surface)
            ),
            "the elapsed-time line",
        )
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    assert "still working" not in final_text(surface)


async def test_the_tools_summary_can_be_turned_off(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, tool_summary=False)
    steps = script({"chunk": "Read it."}, tool("t1", "Read", "read", path="a.py"), done("t1"))
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", steps)))
    assert final_text(surface) == "Read it."


def test_the_block_is_bounded_whatever_the_agent_sends() -> None:
    progress = TurnProgress()
    entries = tuple(PlanEntry("x" * 500 + f" {n}", "pending") for n in range(50))
    progress.on_event(AcpEvent(EventKind.PLAN, plan=entries))
    for n in range(1000):
        progress.on_event(AcpEvent(EventKind.TOOL_CALL, tool=ToolCall(f"t{n}", "y" * 300, "read")))
    block = progress.block(130.0)
    assert block is not None
    lines = block.splitlines()
    assert lines[0] == "still working (2 min)"
    assert len(lines) <= 1 + 1 + bot.progress.PLAN_LINES + 1 + 1 + bot.progress.TOOL_LINES
    assert all(len(line) <= bot.progress.LINE_LIMIT for line in lines)
    assert "… 995 earlier" in lines
    assert progress.tool_summary() == "Tools: 200 reads, 800 other tools"


# ---- the usage footer -------------------------------------------------------------------------
async def test_the_footer_shows_context_use_and_suggests_compact_once_per_crossing(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    finals = []
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        for used in (42, 85, 86, 93, 95, 30, 81):
            steps = script({"chunk": f"at {used}"}, usage(used))
            await finished(surface.post(surface.message("alice", steps)))
            finals.append(final_text(surface))
    hint = "The conversation uses {}% of the agent's context; /compact summarises it to free room."
    assert finals == [
        "at 42\n\nContext 42%",
        f"at 85\n\n{hint.format(80)}\n\nContext 85%",
        "at 86\n\nContext 86%",
        f"at 93\n\n{hint.format(90)}\n\nContext 93%",
        "at 95\n\nContext 95%",
        "at 30\n\nContext 30%",
        f"at 81\n\n{hint.format(80)}\n\nContext 81%",
    ]


async def test_the_prompt_results_token_count_alone_adds_no_footer(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script({"chunk": "ok"}, {"stop": "end_turn", "usage": {"totalTokens": 12345}})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    assert final_text(surface) == "ok"  # no window to measure it against


def test_the_footer_names_the_cost_when_the_agent_gives_it() -> None:
    assert usage_footer(UsageInfo(used=42, size=100, cost=0.183, currency="USD")) == (
        "Context 42% · $0.18"
    )
    assert usage_footer(UsageInfo(percent=7.4, cost=1.5, currency="chf")) == "Context 7% · 1.50 CHF"
    assert usage_footer(UsageInfo(cost=float("nan"))) == ""
    assert usage_footer(None) == ""


# ---- the agent's commands in the native menu ----------------------------------------------------
def commands_update(*names: str) -> dict:
    listed = [
        {"name": name, "description": f"the {name} command", "input": {"hint": "what"}}
        for name in names
    ]
    return {"update": {"sessionUpdate": "available_commands_update", "availableCommands": listed}}


async def test_the_agents_commands_reach_the_menu_only_when_they_change(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(agent_menus=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        for names in (("review", "plan"), ("review", "plan"), ("review",)):
            steps = script(commands_update(*names), {"chunk": "ok"})
            await finished(surface.post(surface.message("alice", steps)))
        await wait_for(lambda: len(surface.ops("agent_menu")) == 2, "two menu updates")
    menus = [call.menu for call in surface.ops("agent_menu")]
    assert menus == [
        (
            MenuCommand("review", "the review command", "what"),
            MenuCommand("plan", "the plan command", "what"),
        ),
        (MenuCommand("review", "the review command", "what"),),
    ]


async def test_a_failing_menu_update_is_logged_and_the_turn_is_unharmed(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    surface = ScriptedSurface(agent_menus=True)
    surface.crash(CHAT, "agent_menu", RuntimeError("menu API down"))
    caplog.set_level(logging.WARNING, "bot.agent_menu")
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        steps = script(commands_update("review"), {"chunk": "ok"})
        await finished(surface.post(surface.message("alice", steps)))
        await wait_for(lambda: "agent command menu" in caplog.text, "the warning")
        surface.crash(CHAT, "agent_menu", None)
        await finished(surface.post(surface.message("alice", "again")))  # tried again
        await wait_for(lambda: surface.ops("agent_menu"), "the menu after all")
    assert final_text(surface).startswith("Echo: again")


async def test_no_menu_calls_where_the_surface_has_no_agent_menus(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        steps = script(commands_update("review"), {"chunk": "ok"})
        await finished(surface.post(surface.message("alice", steps)))
    assert surface.calls and not surface.ops("agent_menu")


async def test_a_released_conversation_repeats_neither_its_menu_nor_its_compact_hint(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(agent_menus=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        for _ in range(2):
            steps = script(commands_update("review"), usage(85), {"chunk": "ok"})
            await finished(surface.post(surface.message("alice", steps)))
            await wait_for(lambda: surface.ops("agent_menu"), "the menu")
            await wait_for(lambda: not app.runners[CHAT].running, "the turn's end")
            app.conversations.release_idle(time.monotonic() + 60)
            assert CHAT not in app.runners
    assert len(surface.ops("agent_menu")) == 1
    finals = [text for text in surface.shown().values() if text.startswith("ok")]
    assert [("/compact" in text) for text in finals] == [True, False]


def test_the_block_shows_the_plan_the_running_command_and_a_retry() -> None:
    progress = TurnProgress()
    assert progress.block(0.0) is None  # nothing to show yet
    plan = (
        PlanEntry("Read", "completed"),
        PlanEntry("Fix", "in_progress"),
        PlanEntry("Test", "pending"),
    )
    progress.on_event(AcpEvent(EventKind.PLAN, plan=plan))
    terminal = TerminalActivity("s", "t", "pytest -q", "3 passed", exited=False)
    progress.on_event(AcpEvent(EventKind.TERMINAL_ACTIVITY, terminal=terminal))
    progress.retrying()
    assert progress.block(3.0) == (
        "working\nPlan (1/3):\n✓ Read\n▸ Fix\n○ Test\n"
        "running: pytest -q — 3 passed\na temporary error; retrying"
    )
    progress.on_event(AcpEvent(EventKind.PLAN, plan=plan[:1]))  # an update replaces the plan
    progress.on_event(
        AcpEvent(EventKind.TERMINAL_ACTIVITY, terminal=replace(terminal, exited=True))
    )
    progress.on_event(AcpEvent(EventKind.TOOL_CALL, tool=ToolCall("c1", "Edit", "edit")))
    assert progress.block(3.0) == "working\nPlan (1/1):\n✓ Read\n▸ Edit"


async def test_a_stopped_turn_keeps_its_notice_above_the_tools_line(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script({"chunk": "Reading."}, tool("t1", "Read", "read", path="a.py"), {"hang": True})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", steps))
        await wait_for(lambda: any("▸ Read (a.py)" in t for t in live_texts(surface)), "the call")
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    final = [text for text in surface.shown().values() if text.startswith("Reading.")][-1]
    assert final == "Reading.\n\nThe turn was stopped.\n\nTools: 1 read"


async def test_the_footer_carries_the_sessions_cost(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    update = {
        "sessionUpdate": "usage_update",
        "used": 42_000,
        "size": 100_000,
        "cost": {"amount": 0.183, "currency": "USD"},
    }
    steps = script({"chunk": "ok"}, tool("t1", "Read", "read"), done("t1"), {"update": update})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    assert final_text(surface) == "ok\n\nTools: 1 read\nContext 42% · $0.18"
