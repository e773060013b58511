"""The gate on what passes through us (issue 22, points 1 and 2): `terminal/create` and
`fs/write_text_file` run only under a person's approval — the agent's own request for the tool
call they belong to, or Switchboard's card when nobody asked — and a tool call the agent reports
running with no approval (changing, kindless or of an unknown kind) ends the turn. The scripted
agent is a real subprocess; each command writes a marker file, so "it ran" is what the disk says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpGateViolation, GatePlan, PendingPermission, PermissionRequest, ToolCall
from bot.permissions import approval_prompt
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script

WAIT = 30


def _tool_call(kind: str | None = None, status: str = "pending", **extra: Any) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": "c1", "status": status}
    update["title"] = extra.pop("title", "Shell")
    if kind is not None:
        update["kind"] = kind
    return {"update": {**update, **extra}}


def _status(status: str) -> dict[str, Any]:
    return {"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": status}}


def _terminal(script_text: str) -> list[dict[str, Any]]:
    create = {"command": "sh", "args": ["-c", script_text]}
    return [
        {"request": {"method": "terminal/create", "params": create}, "save": "t"},
        {
            "request": {
                "method": "terminal/wait_for_exit",
                "params": {"terminalId": "$t.terminalId"},
            }
        },
    ]


def _write(path: Path, content: str) -> dict[str, Any]:
    params = {"path": str(path), "content": content}
    return {"request": {"method": "fs/write_text_file", "params": params}}


class Person:
    """Answers every card: records what it showed and whether the marker existed then."""

    def __init__(self, *choose: str, marker: Path | None = None) -> None:
        self.choose = list(choose)  # one answer per card; the last one repeats
        self.marker = marker
        self.cards: list[PermissionRequest] = []
        self.marker_seen: list[bool] = []

    def __call__(self, pending: PendingPermission) -> str | None:
        self.cards.append(pending.request)
        if self.marker is not None:
            self.marker_seen.append(self.marker.exists())
        kind = self.choose.pop(0) if len(self.choose) > 1 else self.choose[0]
        option = pending.request.option_of_kind(kind)
        return option.option_id if option else None


async def _turns(
    fake_agent: FakeAgent,
    workspace: Path,
    prompts: list[str],
    person: Person,
    gate: GatePlan | None = None,
) -> list[str]:
    spec = agent_spec(fake_agent, workspace)
    said: list[str] = []
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, gate or GatePlan()) as client:
            session = await client.open_session()
            assert session.gated
            for prompt in prompts:
                said += texts(await collect_turn(session, prompt, person))
    return said


def _replies(said: list[str]) -> list[dict[str, Any]]:
    return [json.loads(text.removeprefix("reply:")) for text in said if text.startswith("reply:")]


# ---- point 1: what passes through us ---------------------------------------------------------
@pytest.mark.anyio
async def test_an_unasked_terminal_after_a_kindless_tool_call_waits_for_a_person(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    person = Person("allow_once", marker=marker)
    prompt = script(_tool_call(), *_terminal("touch ran.txt"), {"chunk": "done"})
    said = await _turns(fake_agent, workspace, [prompt], person)
    (card,) = person.cards
    assert person.marker_seen == [False]  # nothing ran before the person allowed it
    assert marker.exists() and "done" in said
    assert [o.name for o in card.options] == ["Allow", "Decline"]
    shown = approval_prompt(card)
    assert "sh -c touch ran.txt" in shown and "did not ask" in shown


@pytest.mark.anyio
async def test_a_declined_terminal_never_runs_and_the_agent_hears_why(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    person = Person("reject_once", marker=marker)
    prompt = script(_tool_call(), *_terminal("touch ran.txt"), {"chunk": "done"})
    said = await _turns(fake_agent, workspace, [prompt], person)
    assert len(person.cards) == 1 and not marker.exists()
    refused = _replies(said)[0]["error"]
    assert refused["message"] == "terminal/create refused: the person declined it"


@pytest.mark.anyio
async def test_an_asked_and_allowed_command_runs_without_a_second_card(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    person = Person("allow_once", marker=marker)
    tool = _tool_call("execute", rawInput={"command": "touch ran.txt"}, title="Run a command")
    prompt = script(
        tool,
        {"permission": {"toolCall": {"toolCallId": "c1"}}},
        _status("in_progress"),
        *_terminal("touch ran.txt"),
        _status("completed"),
        {"chunk": "done"},
    )
    said = await _turns(fake_agent, workspace, [prompt], person)
    assert len(person.cards) == 1 and person.cards[0].tool.tool_call_id == "c1"
    assert marker.exists() and "done" in said


@pytest.mark.anyio
async def test_an_approval_covers_only_the_command_it_showed(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    """Allowed `ls`, the agent runs `ls; touch ran.txt`: that was never shown, so it is asked."""
    person = Person("allow_once", "reject_once")
    tool = _tool_call("execute", rawInput={"command": "ls"}, title="List files")
    asked = {"permission": {"toolCall": {"toolCallId": "c1"}}}
    prompt = script(tool, asked, *_terminal("ls; touch ran.txt"), {"chunk": "done"})
    said = await _turns(fake_agent, workspace, [prompt], person)
    first, second = person.cards
    assert first.tool.tool_call_id == "c1" and "did not ask" in second.tool.title
    assert not (workspace / "ran.txt").exists()
    assert "declined" in _replies(said)[0]["error"]["message"]


@pytest.mark.anyio
async def test_an_unasked_write_shows_the_file_and_its_diff(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("one\ntwo\nthree\n")
    person = Person("allow_once")
    prompt = script(_write(notes, "one\n2\nthree\n"), {"chunk": "done"})
    said = await _turns(fake_agent, workspace, [prompt], person)
    (card,) = person.cards
    shown = approval_prompt(card)
    assert "notes.txt: +1 \u22121" in shown
    assert "\n-two\n" in shown and "\n+2\n" in shown
    assert notes.read_text() == "one\n2\nthree\n" and "done" in said


@pytest.mark.anyio
async def test_a_declined_write_leaves_the_file_as_it_was(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("mine\n")
    person = Person("reject_once")
    said = await _turns(fake_agent, workspace, [script(_write(notes, "theirs\n"))], person)
    assert notes.read_text() == "mine\n" and len(person.cards) == 1
    assert "declined" in _replies(said)[0]["error"]["message"]


@pytest.mark.anyio
async def test_an_edit_the_person_allowed_covers_its_write(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    person = Person("allow_once")
    edit = _tool_call("edit", title="Edit notes.txt", locations=[{"path": str(notes)}])
    asked = {"permission": {"toolCall": {"toolCallId": "c1"}}}
    await _turns(fake_agent, workspace, [script(edit, asked, _write(notes, "x\n"))], person)
    assert len(person.cards) == 1 and notes.read_text() == "x\n"


@pytest.mark.anyio
async def test_allow_always_covers_later_commands_that_start_with_the_one_allowed(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    person = Person("allow_always")
    tool = _tool_call("execute", rawInput={"command": "touch"}, title="touch")
    first = script(tool, {"permission": {"toolCall": {"toolCallId": "c1"}}}, _status("completed"))
    later = script(*_terminal("touch later.txt"))
    await _turns(fake_agent, workspace, [first, later], person)
    assert len(person.cards) == 1 and (workspace / "later.txt").exists()


@pytest.mark.anyio
async def test_the_operator_who_allows_ungated_tools_is_not_asked(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    person = Person("reject_once")
    prompt = script(*_terminal("touch ran.txt"), _write(workspace / "w.txt", "w"))
    await _turns(fake_agent, workspace, [prompt], person, GatePlan(allow_ungated=True))
    assert not person.cards
    assert (workspace / "ran.txt").exists() and (workspace / "w.txt").exists()


# ---- point 2: what the agent reports doing ---------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize(
    "kind", [None, "frobnicate", "fetch", "execute"], ids=["missing", "unknown", "fetch", "execute"]
)
async def test_a_tool_running_unapproved_with_a_changing_missing_or_unknown_kind_ends_the_turn(
    fake_agent: FakeAgent, workspace: Path, kind: str | None
) -> None:
    prompt = script(
        _tool_call(kind, title="Mystery"), _status("in_progress"), {"chunk": "meanwhile"}
    )
    with pytest.raises(AcpGateViolation) as caught:
        await _turns(fake_agent, workspace, [prompt], Person("allow_once"))
    assert "ran a tool (Mystery) without asking for approval" in caught.value.text
    assert "meanwhile" not in caught.value.partial_output
    assert fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_a_tool_reported_running_then_asked_for_is_no_violation(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    """opencode reports `in_progress` and asks right after; allowed, it completes."""
    asked = {"permission": {"toolCall": {"toolCallId": "c1"}}}
    prompt = script(
        _tool_call("execute", title="echo hi"),
        _status("in_progress"),
        asked,
        _status("completed"),
        {"chunk": "ok"},
    )
    assert "ok" in await _turns(fake_agent, workspace, [prompt], Person("allow_once"))
    assert not fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_a_running_kindless_tool_whose_command_the_person_allows_on_our_card_may_complete(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    person = Person("allow_once")
    prompt = script(
        _tool_call(status="in_progress"),
        *_terminal("touch ran.txt"),
        _status("completed"),
        {"chunk": "ok"},
    )
    assert "ok" in await _turns(fake_agent, workspace, [prompt], person)
    assert len(person.cards) == 1 and (workspace / "ran.txt").exists()
    assert not fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_a_rejected_tool_that_runs_anyway_ends_the_turn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    asked = {"permission": {"toolCall": {"toolCallId": "c1"}}}
    prompt = script(_tool_call("edit"), asked, _status("completed"), {"sleep": 5})
    with pytest.raises(AcpGateViolation):
        await _turns(fake_agent, workspace, [prompt], Person("reject_once"))


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["read", "search", "think", "other", "switch_mode"])
async def test_named_kinds_that_change_nothing_run_unasked(
    fake_agent: FakeAgent, workspace: Path, kind: str
) -> None:
    prompt = script(_tool_call(kind), _status("in_progress"), _status("completed"), {"chunk": "ok"})
    assert "ok" in await _turns(fake_agent, workspace, [prompt], Person("allow_once"))
    assert not fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_a_request_that_would_be_refused_anyway_shows_no_card(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    person = Person("allow_once")
    away = {"command": "touch", "args": ["x"], "cwd": str(outside)}
    prompt = script(
        _write(outside / "x.txt", "x"),
        {"request": {"method": "terminal/create", "params": away}},
        _write(workspace / ".." / "escape.txt", "x"),
    )
    said = await _turns(fake_agent, workspace, [prompt], person)
    assert not person.cards and not list(outside.iterdir())
    errors = [reply["error"]["message"] for reply in _replies(said)]
    assert len(errors) == 3 and all("outside the workspace" in e for e in errors)


@pytest.mark.anyio
async def test_a_shell_with_options_besides_its_script_is_not_covered_by_the_script_alone(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    (workspace / "rc").write_text("touch ran.txt\n")
    person = Person("allow_once", "reject_once")
    tool = _tool_call("execute", rawInput={"command": "true"}, title="true")
    asked = {"permission": {"toolCall": {"toolCallId": "c1"}}}
    with_rc = {"command": "bash", "args": ["--rcfile", "rc", "-i", "-c", "true"]}
    prompt = script(tool, asked, {"request": {"method": "terminal/create", "params": with_rc}})
    await _turns(fake_agent, workspace, [prompt], person)
    assert len(person.cards) == 2 and not (workspace / "ran.txt").exists()


@pytest.mark.anyio
async def test_a_completed_switch_mode_tool_call_calls_the_mode_watchers_hook_in_the_turn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    seen: list[str] = []

    async def recheck(tool: ToolCall) -> None:
        seen.append(tool.tool_call_id)

    prompt = script(_tool_call("switch_mode"), _status("completed"), {"chunk": "ok"})
    spec = agent_spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan()) as client:
            session = await client.open_session()
            session.on_switch_mode = recheck
            events = await collect_turn(session, prompt)
    assert seen == ["c1"] and "ok" in texts(events)
