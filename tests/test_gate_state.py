"""The agent's approval state (issue 22, points 3-5): permission options are part of the gate
(GitHub Copilot CLI's `allow_all`, category `permissions`, `off` = asks; its modes are URIs), the
state is watched and put back before the next prompt or tool (acp/gate_watch.py), and the agent's
own commands that would switch approvals off are never sent on (bot/commands.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpToolGateUnroutable, GatePlan, NoticeKind, PendingPermission, SessionNotice
from acp.gate_options import asking_value, switches_approvals_off
from acp.types import ConfigChoice, ConfigOption
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script

WAIT = 30
URI = "https://agentclientprotocol.com/protocol/session-modes"
COPILOT_MODES = f"{URI}#agent=Agent,{URI}#plan=Plan,{URI}#autopilot=Autopilot"
GEMINI = {
    "default": "Prompts for approval",
    "autoEdit": "Auto-approves edit tools",
    "yolo": "Auto-approves all tools",
}


def allow_all(current: str) -> dict[str, Any]:
    """Copilot CLI's permissions option as it advertises it."""
    return {
        "id": "allow_all",
        "name": "Allow all",
        "category": "permissions",
        "type": "select",
        "currentValue": current,
        "options": [{"value": "off", "name": "Off"}, {"value": "on", "name": "On"}],
    }


def copilot(current: str = "off", *extra: str) -> tuple[str, ...]:
    """A Copilot-shaped scripted agent: modes as URIs, none of them asking, and `allow_all`."""
    return (
        "--modes",
        COPILOT_MODES,
        "--current-mode",
        f"{URI}#agent",
        "--config-json",
        json.dumps([allow_all(current)]),
        *extra,
    )


def flip(current: str = "on") -> dict[str, Any]:
    """The agent's own switch, as Copilot reports its `/allow-all on`."""
    return {
        "update": {"sessionUpdate": "config_option_update", "configOptions": [allow_all(current)]}
    }


def marker_steps(path: Path) -> tuple[dict[str, Any], ...]:
    """A tool that runs through us: a terminal whose command leaves `path` behind, waited for."""
    params = {"command": "sh", "args": ["-c", f"touch {path}"]}
    wait = {"method": "terminal/wait_for_exit", "params": {"terminalId": "$t.terminalId"}}
    return (
        {"request": {"method": "terminal/create", "params": params}, "save": "t"},
        {"request": wait},
    )


def _allow(pending: PendingPermission) -> str | None:
    option = pending.request.option_of_kind("allow_once")
    return option.option_id if option else None


def _inbound(fake_agent: FakeAgent) -> list[dict[str, Any]]:
    """Every frame the agent read, in order."""
    return [r["frame"] for r in fake_agent.records() if r.get("dir") == "in" and "frame" in r]


def _position(frames: list[dict[str, Any]], method: str) -> int:
    return next(i for i, f in enumerate(frames) if f.get("method") == method)


def _reply_to_terminal(frames: list[dict[str, Any]]) -> int:
    """Where our answer to the agent's terminal/create is (the agent's requests count from 0)."""
    return next(
        i
        for i, f in enumerate(frames)
        if "method" not in f and isinstance(f.get("result"), dict) and "terminalId" in f["result"]
    )


# ---- the rules --------------------------------------------------------------------------------
def test_the_asking_value_of_permission_options() -> None:
    off_on = (ConfigChoice("off", "Off"), ConfigChoice("on", "On"))
    assert (
        asking_value(ConfigOption("allow_all", "Allow all", "permissions", "select", "on", off_on))
        == "off"
    )
    assert asking_value(ConfigOption("yolo", "YOLO", "", "boolean", "true")) == "false"
    assert (
        asking_value(ConfigOption("confirm_tools", "Confirm tools", "permissions", "boolean"))
        == "true"
    )
    policy = (ConfigChoice("never", "Never ask"), ConfigChoice("ask", "Ask first"))
    assert (
        asking_value(ConfigOption("policy", "Policy", "permissions", "select", "", policy)) == "ask"
    )
    unknown = (ConfigChoice("x", "X"), ConfigChoice("y", "Y"))
    assert asking_value(ConfigOption("level", "Level", "permissions", "select", "", unknown)) == ""


def test_which_agent_commands_switch_approvals_off() -> None:
    for name in ("allow-all", "yolo", "autopilot", "permissions", "bypass", "trust-all"):
        assert switches_approvals_off(name), name
    assert switches_approvals_off("auto-approve")
    assert switches_approvals_off("dangerously-skip")
    assert switches_approvals_off("tools", "Enable all permissions: allow all tools")
    assert switches_approvals_off("approval-mode", args="yolo")
    for name in ("review", "compress", "approval-mode", "model", "init", "tasks"):
        assert not switches_approvals_off(name), name


# ---- at session start -------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("current", ["off", "on"])
async def test_a_copilot_shaped_agent_starts_gated_by_its_permissions_option(
    fake_agent: FakeAgent, workspace: Path, current: str
) -> None:
    spec = agent_spec(fake_agent, workspace, *copilot(current), dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            assert session.gated
            assert session.gate_line == "asks before tools: allow_all off"
            assert session.state.config_options[0].current == "off"
    sets = fake_agent.frames_in("session/set_config_option")
    if current == "on":
        (switch,) = sets
        assert switch["params"]["configId"] == "allow_all" and switch["params"]["value"] == "off"
    else:
        assert not sets  # already asking: nothing to set
    assert not fake_agent.frames_in("session/set_mode")  # its URI modes say nothing of asking


@pytest.mark.anyio
async def test_a_permissions_option_whose_asking_value_is_unknown_refuses_the_agent(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    option = {
        "id": "tool_policy",
        "category": "permissions",
        "type": "select",
        "currentValue": "x",
        "options": [{"value": "x"}, {"value": "y"}],
    }
    options = ("--modes", "default", "--config-json", json.dumps([option]))
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            with pytest.raises(AcpToolGateUnroutable) as caught:
                await client.open_session()
    assert "'tool_policy'" in str(caught.value)
    assert "none of their values is known to ask" in str(caught.value)


# ---- watched mid-session ----------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_permission_option_flipped_mid_turn_is_put_back_before_the_next_tool(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    spec = agent_spec(fake_agent, workspace, *copilot("off"), dialect="generic")
    notices: list[SessionNotice] = []
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            session.state.listen(notices.append)
            prompt = script(flip("on"), *marker_steps(marker), {"chunk": "done"})
            events = await collect_turn(session, prompt, _allow)
            assert session.state.config_options[0].current == "off"
    assert "done" in texts(events)
    assert marker.exists()
    frames = _inbound(fake_agent)
    restore = _position(frames, "session/set_config_option")
    assert frames[restore]["params"] == {
        "sessionId": session.session_id,
        "configId": "allow_all",
        "value": "off",
    }
    assert restore < _reply_to_terminal(frames)  # back to asking before the tool ran
    (notice,) = notices
    assert notice.kind is NoticeKind.GATE_RESTORED
    assert (notice.previous, notice.detail) == ("allow_all on", "allow_all off")


@pytest.mark.anyio
async def test_a_switch_to_an_ungated_mode_mid_turn_is_restored_before_the_next_tool(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    options = (
        "--modes",
        ",".join(GEMINI),
        "--current-mode",
        "default",
        "--mode-descriptions",
        json.dumps(GEMINI),
    )
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    switched = {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "yolo"}}
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            assert session.gate_line == "asks before tools: mode default"
            await collect_turn(session, script(switched, *marker_steps(marker)), _allow)
            assert session.state.mode == "default"
    frames = _inbound(fake_agent)
    restore = _position(frames, "session/set_mode")
    assert frames[restore]["params"]["modeId"] == "default"
    assert restore < _reply_to_terminal(frames)
    assert marker.exists()


@pytest.mark.anyio
async def test_a_flip_between_turns_is_put_back_before_the_next_prompt(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, *copilot("off"), dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            # the agent answers, then switches itself (a late frame, read between turns)
            await collect_turn(session, script({"stop": "end_turn"}, flip("on")))
            with anyio.fail_after(5):
                while session.state.config_options[0].current != "on":
                    await anyio.sleep(0.01)
            await collect_turn(session, "hello again")
    frames = _inbound(fake_agent)
    prompts = [i for i, f in enumerate(frames) if f.get("method") == "session/prompt"]
    restore = _position(frames, "session/set_config_option")
    assert prompts[0] < restore < prompts[1]


@pytest.mark.anyio
async def test_an_agent_that_will_not_go_back_to_asking_is_refused_and_the_tool_never_runs(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    marker = workspace / "ran.txt"
    options = copilot("off", "--config-refuse", "off")
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            prompt = script(flip("on"), *marker_steps(marker), {"sleep": 5})
            with pytest.raises(AcpToolGateUnroutable) as caught:
                await collect_turn(session, prompt, _allow)
    assert "it did not go back to asking before tools (asks before tools: allow_all off)" in str(
        caught.value
    )
    assert not marker.exists()
    assert fake_agent.frames_in("session/cancel")
