"""The agent's approval state (issue 22, points 3-5): permission options are part of the gate
(GitHub Copilot CLI's `allow_all`, category `permissions`, `off` = asks; its modes are URIs), the
state is watched and put back before the next prompt or tool (acp/gate_watch.py), and the agent's
own commands that would switch approvals off are never sent on (bot/commands.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpToolGateUnroutable, GatePlan, NoticeKind, PendingPermission, SessionNotice
from acp.gate_options import asking_value, gate_options, switches_approvals_off
from acp.types import ConfigChoice, ConfigOption
from config import load_settings
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving, telegram_access
from tests.test_audit import records
from tests.test_telegram import ALICE, shows

pytestmark = pytest.mark.usefixtures("clean_env")

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


def test_which_options_are_part_of_the_gate() -> None:
    off_on = (ConfigChoice("off", "Off"), ConfigChoice("on", "On"))
    levels = (ConfigChoice("low", "Low"), ConfigChoice("high", "High"))
    found, unknown = gate_options(
        [
            ConfigOption("allow_all", "Allow all", "permissions", "select", "on", off_on),
            ConfigOption("autoApprove", "Auto approve", "", "boolean", "true"),
            ConfigOption("model", "Model", "model", "select", "m", (ConfigChoice("m"),)),
            ConfigOption("trust_level", "Trust level", "", "select", "low", levels),  # name only
            ConfigOption("sandbox", "Sandbox", "permissions", "select", "low", levels),
        ]
    )
    assert [(o.option_id, o.value, o.boolean) for o in found] == [
        ("allow_all", "off", False),
        ("autoApprove", "false", True),
    ]
    assert [o.option_id for o in unknown] == ["sandbox"]  # refuses the agent; the name alone not


def test_which_agent_commands_switch_approvals_off() -> None:
    for name in ("allow-all", "yolo", "autopilot", "permissions", "bypass", "trust-all"):
        assert switches_approvals_off(name), name
    assert switches_approvals_off("auto-approve")
    assert switches_approvals_off("dangerously-skip")
    assert switches_approvals_off("tools", "Enable all permissions: allow all tools")
    assert switches_approvals_off("approval-mode", args="yolo")
    assert switches_approvals_off("approval-mode", args="auto-edit")  # Qwen Code's modes
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
async def test_a_boolean_allow_all_option_is_set_false_with_a_boolean_and_watched(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    option = {"id": "autoApprove", "name": "Auto-approve", "type": "boolean", "currentValue": True}
    flipped = {"update": {"sessionUpdate": "config_option_update", "configOptions": [option]}}
    options = ("--modes", "default", "--config-json", json.dumps([option]))
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            assert session.gate_line == "asks before tools: mode default, autoApprove false"
            await collect_turn(session, script(flipped, {"chunk": "ok"}))
            assert session.state.config_options[0].current == "false"
    sets = [f["params"] for f in fake_agent.frames_in("session/set_config_option")]
    assert (
        sets
        == [
            {
                "sessionId": session.session_id,
                "configId": "autoApprove",
                "value": False,
                "type": "boolean",
            }
        ]
        * 2
    )  # at start, and after the agent's own switch


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
async def test_a_distrusted_gate_is_set_again_before_the_next_prompt(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # what a `switch_mode` tool call or a tool run unasked leads to (acp/_turn.py's checks)
    options = ("--modes", ",".join(GEMINI), "--current-mode", "default")
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    notices: list[SessionNotice] = []
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            session.state.listen(notices.append)
            assert not fake_agent.frames_in("session/set_mode")  # it started asking
            session.distrust_gate()
            await collect_turn(session, "hello")
    frames = _inbound(fake_agent)
    assert _position(frames, "session/set_mode") < _position(frames, "session/prompt")
    assert notices == []  # nothing was seen to leave: nothing to tell


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


# ---- in a conversation (the real app, a scripted surface) -------------------------------------
COMMANDS = [
    {"name": "allow-all", "description": "Enable all permissions (tools, paths and URLs)"},
    {"name": "tools", "description": "Let every tool run: allow all, no questions"},
    {"name": "review", "description": "Review the changes"},
]
REFUSED = "Switchboard does not send /{} to the agent: approvals are Switchboard's to manage"


def copilot_app(tmp_path: Path, fake_agent: FakeAgent, current: str = "off") -> Any:
    commands = {
        "method": "session/update",
        "params": {
            "update": {"sessionUpdate": "available_commands_update", "availableCommands": COMMANDS}
        },
    }
    options = (*copilot(current), "--after-new", json.dumps([commands]))
    return engine_settings(
        tmp_path,
        fake_agent,
        agent="generic",
        agent_command=fake_agent.command(*options, dialect="generic"),
    )


@pytest.mark.anyio
async def test_approval_commands_are_not_sent_help_and_menus_leave_them_out_status_shows_the_gate(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(agent_menus=True)
    async with running_app(copilot_app(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "hi")))
        for typed in ("/allow-all on", "/yolo", "//allow-all on", "/tools", "/approval-mode yolo"):
            await finished(surface.post(surface.message("alice", typed)))
        await finished(surface.post(surface.message("alice", "/help")))
        await finished(surface.post(surface.message("alice", "/status")))
        await wait_for(lambda: surface.ops("agent_menu"), "the agent's menu")
    said = [call.text for call in surface.ops("send")]
    for name in ("allow-all", "yolo", "allow-all", "tools", "approval-mode"):
        assert any(text.startswith(REFUSED.format(name)) for text in said), name
    prompts = fake_agent.prompt_texts()
    assert prompts == ["hi"]  # none of them reached the agent
    (help_text,) = [text for text in said if text.startswith("Commands:")]
    assert "/review" in help_text
    assert "allow-all" not in help_text and "/tools" not in help_text
    (menu,) = [call.menu for call in surface.ops("agent_menu")]
    assert [command.name for command in menu] == ["review"]
    (status,) = [text for text in said if text.startswith("Agent:")]
    assert "Tool gate: asks before tools: allow_all off" in status
    assert "#agent" not in status.split("Tool gate:")[1]
    found = await records(str(tmp_path / "state.db"))
    assert [(r["actor"], r["action"], r["command"]) for r in found] == [
        ("alice", "agent approvals command", name)
        for name in ("allow-all", "yolo", "allow-all", "tools", "approval-mode")
    ]


@pytest.mark.anyio
async def test_a_flip_in_a_conversation_is_put_back_told_in_one_sentence_and_audited(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(copilot_app(tmp_path, fake_agent), surface):
        prompt = script(flip("on"), {"chunk": "still here"})
        await finished(surface.post(surface.message("alice", prompt)))
        await wait_for(lambda: "approvals off" in surface.transcript(), "the sentence")
    sentence = next(c.text for c in surface.ops("send") if "approvals off" in c.text)
    assert sentence == (
        "The agent switched its approvals off (allow_all on), so Switchboard put them back "
        "(allow_all off): approvals are Switchboard's to manage."
    )
    (restore,) = fake_agent.frames_in("session/set_config_option")
    assert restore["params"]["value"] == "off"
    found = await records(str(tmp_path / "state.db"))
    assert [(r["kind"], r["actor"], r["action"]) for r in found] == [
        ("refused", "alice", "agent switched approvals off")
    ]
    assert found[0]["agent_set"] == "allow_all on" and found[0]["restored"] == "allow_all off"


# ---- through the CLI --------------------------------------------------------------------------
def test_switchboard_chat_refuses_an_approval_command_and_puts_a_flip_back(
    cli_env: dict[str, str], tmp_path: Path, fake_agent: FakeAgent
) -> None:
    command = fake_agent.command(*copilot("on"), dialect="generic")
    lines = ["/allow-all on", script(flip("on"), {"chunk": "after the flip"}), "/status"]
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "chat", "--agent", "generic", "--agent-command", command],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert REFUSED.format("allow-all") in proc.stdout
    assert "Tool gate: asks before tools: allow_all off" in proc.stdout
    assert "after the flip" in proc.stdout
    assert "The agent switched its approvals off (allow_all on)" in proc.stdout
    assert "Traceback" not in proc.stderr
    # set at start (it started `on`), and put back after the flip
    values = [f["params"]["value"] for f in fake_agent.frames_in("session/set_config_option")]
    assert values == ["off", "off"]
    assert all("allow-all" not in text for text in fake_agent.prompt_texts())


# ---- through Telegram (the real python-telegram-bot against the fake Bot API) ------------------
@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        yield fake


@pytest.mark.anyio
async def test_through_telegram_an_approval_command_is_refused_and_a_flip_put_back(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    base = copilot_app(tmp_path, fake_agent)
    settings = base.model_copy(
        update={"telegram": load_settings(telegram=telegram_access(api, ALICE)).telegram}
    )
    async with serving(settings):
        api.dm(ALICE, "/allow-all on")
        await wait_for(shows(api, ALICE.id, "does not send /allow-all"), "the refusal", 15)
        api.dm(ALICE, script(flip("on"), {"chunk": "after the flip"}))
        await wait_for(shows(api, ALICE.id, "put them back"), "the restore sentence", 15)
    text = api.chat_text(ALICE.id)
    assert REFUSED.format("allow-all") in text
    assert "The agent switched its approvals off (allow_all on)" in text
    assert all("allow-all" not in prompt for prompt in fake_agent.prompt_texts())
    (restore,) = fake_agent.frames_in("session/set_config_option")
    assert restore["params"] == {
        "sessionId": restore["params"]["sessionId"],
        "configId": "allow_all",
        "value": "off",
    }


@pytest.mark.anyio
async def test_a_command_withheld_by_its_description_stays_refused_after_a_release(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(copilot_app(tmp_path, fake_agent), surface) as app:
        await finished(surface.post(surface.message("alice", "hi")))
        await wait_for(lambda: not app.runners[CHAT].running, "the turn's end")
        app.conversations.release_idle(time.monotonic() + 60)
        assert CHAT not in app.runners
        await finished(surface.post(surface.message("bob", "/tools")))  # no session open yet
    assert any(c.text.startswith(REFUSED.format("tools")) for c in surface.ops("send"))
    assert fake_agent.prompt_texts() == ["hi"]
