"""A gate violation: while the gate holds, a tool that changes things (edit, execute, delete,
move) completes with no permission request for its id. The turn is stopped with session/cancel,
the person told in one sentence, and an ERROR logged naming the agent and the tool."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpGateViolation, GatePlan, PendingPermission
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script

WAIT = 20


def _tool(status: str, kind: str = "edit", variant: str = "tool_call") -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": variant, "toolCallId": "call_5", "status": status}
    if variant == "tool_call":
        update.update(title="Write notes.txt", kind=kind, locations=[{"path": "notes.txt"}])
    return {"update": update}


AFTER = ({"chunk": "done"}, {"sleep": 5}, {"stop": "end_turn"})


def _allow(pending: PendingPermission) -> str | None:
    option = pending.request.option_of_kind("allow_once")
    return option.option_id if option else None


async def _run(
    fake_agent: FakeAgent,
    workspace: Path,
    prompt: str,
    *,
    gate: GatePlan,
    dialect: str = "kiro",
    options: tuple[str, ...] = (),
) -> list[str]:
    """The turn's texts; raises what the turn raised."""
    spec = agent_spec(fake_agent, workspace, *options, dialect=dialect)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, gate) as client:
            session = await client.open_session()
            events = await collect_turn(session, prompt, _allow)
    return [e.text for e in events if e.text]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            (_tool("pending"), _tool("completed", variant="tool_call_update")), id="update"
        ),
        pytest.param(
            (_tool("in_progress", kind="execute"), _tool("completed", variant="tool_call_update")),
            id="in-progress",
        ),
        pytest.param((_tool("completed", kind="delete"),), id="completed-at-once"),
    ],
)
async def test_a_changing_tool_that_ran_unasked_stops_the_turn(
    fake_agent: FakeAgent,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
    steps: tuple[dict[str, Any], ...],
) -> None:
    caplog.set_level(logging.ERROR)
    with pytest.raises(AcpGateViolation) as caught:
        await _run(fake_agent, workspace, script(*steps, *AFTER), gate=GatePlan())
    sentence = caught.value.text
    assert sentence.startswith("fake-agent (python fake_agent.py, the kiro preset) ran a tool")
    assert "Write notes.txt" in sentence and "stopped the turn" in sentence
    assert sentence.count(". ") == 0 and sentence.endswith(".")
    assert fake_agent.frames_in("session/cancel")
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "fake-agent" in record.getMessage() and "Write notes.txt" in record.getMessage()


@pytest.mark.anyio
async def test_a_tool_that_asked_first_or_only_reads_is_no_violation(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    asked = (
        _tool("pending"),
        {"permission": {"toolCall": {"toolCallId": "call_5"}}},
        _tool("completed", variant="tool_call_update"),
        {"chunk": "done"},
    )
    assert "done" in await _run(fake_agent, workspace, script(*asked), gate=GatePlan())
    read = (_tool("completed", kind="read"), {"chunk": "done"})
    assert "done" in await _run(fake_agent, workspace, script(*read), gate=GatePlan())
    assert not fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_without_a_holding_gate_nothing_is_enforced(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    steps = (_tool("completed"), {"chunk": "done"})
    # the operator's opt-out, and codex's read-only sandbox, which runs confined commands unasked
    texts = await _run(fake_agent, workspace, script(*steps), gate=GatePlan(enforced=False))
    assert "done" in texts
    codex = await _run(
        fake_agent,
        workspace,
        script(*steps),
        gate=GatePlan(mode="read-only"),
        dialect="codex",
        options=("--modes", "agent,read-only"),
    )
    assert "done" in codex
    assert not fake_agent.frames_in("session/cancel")


def test_ask_on_an_agent_in_its_asking_mode_that_edits_unasked_is_stopped(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    described = {"accept-edits": "Edits files without asking", "ask": "Asks before every tool"}
    command = fake_agent.command(
        "--modes",
        ",".join(described),
        "--mode-descriptions",
        json.dumps(described),
        dialect="generic",
    )
    prompt = script(_tool("completed"), *AFTER)
    result = run_cli("ask", "--agent", "generic", "--agent-command", command, prompt)
    assert result.returncode == 1
    assert "ran a tool (Write notes.txt) without asking for approval" in result.stderr
    assert '"level": "error"' in result.stderr
    assert fake_agent.frames_in("session/cancel")


@pytest.mark.anyio
async def test_after_allow_always_unasked_runs_in_that_session_are_no_violation(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    def always(pending: PendingPermission) -> str | None:
        option = pending.request.option_of_kind("allow_always")
        return option.option_id if option else None

    asked = (
        _tool("pending"),
        {"permission": {"toolCall": {"toolCallId": "call_5"}}},
        _tool("completed", variant="tool_call_update"),
    )
    spec = agent_spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan()) as client:
            session = await client.open_session()
            assert session.gated
            await collect_turn(session, script(*asked), always)
            events = await collect_turn(session, script(_tool("completed"), {"chunk": "done"}))
    assert "done" in [e.text for e in events]
    assert not fake_agent.frames_in("session/cancel")
