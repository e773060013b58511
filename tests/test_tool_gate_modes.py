"""The tool gate decided from what the agent advertises: which mode asks (the rule in
acp/tool_gate.py), setting it after session/new and session/load, the agent's confirmation,
SWITCHBOARD_AGENT_MODE, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from acp import AcpToolGateUnroutable, GatePlan, get_backend, plan_tool_gate
from acp.tool_gate import AdvertisedMode, advertised_modes, asking_mode
from tests.acp_helpers import agent_spec, open_test_client
from tests.conftest import FakeAgent

WAIT = 20

GEMINI = {
    "default": "Prompts for approval",
    "autoEdit": "Auto-approves edit tools",
    "yolo": "Auto-approves all tools",
}
VIBE = {
    "accept-edits": "Edits files without asking; asks before commands",
    "ask": "Asks before every tool",
    "plan": "Read-only planning",
}


def _modes(described: dict[str, str]) -> list[AdvertisedMode]:
    return [AdvertisedMode(mode_id, description=text) for mode_id, text in described.items()]


# ---- the rule -------------------------------------------------------------------------------
def test_gemini_default_and_vibe_ask_are_the_asking_modes() -> None:
    gemini = asking_mode(_modes(GEMINI))
    vibe = asking_mode(_modes(VIBE))
    assert gemini is not None and gemini.id == "default"
    assert vibe is not None and vibe.id == "ask"


def test_claude_and_codex_presets_modes_are_found_by_the_rule_too() -> None:
    claude = asking_mode(
        [
            AdvertisedMode("auto", "Auto"),
            AdvertisedMode("acceptEdits", "Accept Edits"),
            AdvertisedMode("default", "Manual"),
            AdvertisedMode("bypassPermissions", "Bypass Permissions"),
        ]
    )
    assert claude is not None and claude.id == "default"


def test_a_mode_found_by_its_description_and_auto_words_never_chosen() -> None:
    found = asking_mode(
        [
            AdvertisedMode("autopilot", "Autopilot", "asks nothing"),
            AdvertisedMode("careful", "Careful", "Requires your approval before each tool"),
        ]
    )
    assert found is not None and found.id == "careful"
    # "ask" inside another word, a trusting word beside an asking one, a full-access mode
    assert asking_mode([AdvertisedMode("tasks", "Tasks")]) is None
    assert asking_mode([AdvertisedMode("default", "Default", "Auto-approve safe tools")]) is None
    assert asking_mode([AdvertisedMode("agent", "Agent", "Full access, asks never")]) is None
    assert asking_mode([AdvertisedMode("ask", "Ask", "Runs tools without asking")]) is None


def test_modes_are_read_from_config_options_of_category_mode_with_any_id_and_groups() -> None:
    result = {
        "configOptions": [
            {
                "id": "approval_mode",
                "category": "mode",
                "currentValue": "yolo",
                "options": [
                    {"group": "safe", "name": "Safe", "options": [{"value": "ask", "name": "A"}]},
                    {"value": "yolo", "name": "Y"},
                ],
            },
            {"id": "model", "category": "model", "options": [{"value": "m"}]},
        ]
    }
    modes = advertised_modes(result)
    assert [(m.id, m.option) for m in modes] == [
        ("ask", "approval_mode"),
        ("yolo", "approval_mode"),
    ]


def test_the_generic_preset_is_no_longer_refused_before_spawning() -> None:
    plan = plan_tool_gate(get_backend("generic"), ["my-agent"], allow_ungated=False)
    assert plan.detect and plan.enforced
    named = plan_tool_gate(get_backend("claude"), ["c"], allow_ungated=False, mode="plan")
    assert named.mode == "plan" and named.explicit  # the setting overrides the preset's mode


# ---- against the scripted agent -------------------------------------------------------------
def _described(described: dict[str, str], current: str, *extra: str) -> tuple[str, ...]:
    return (
        "--modes",
        ",".join(described),
        "--current-mode",
        current,
        "--mode-descriptions",
        json.dumps(described),
        *extra,
    )


@pytest.mark.anyio
async def test_a_generic_agent_is_put_in_its_asking_mode_after_session_new(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, *_described(GEMINI, "yolo"), dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            assert session.gated
    (switch,) = fake_agent.frames_in("session/set_mode")
    assert switch["params"]["modeId"] == "default"


@pytest.mark.anyio
async def test_a_mode_config_option_with_its_own_id_is_set_and_confirmed(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    options = _described(
        VIBE, "accept-edits", "--config-options", "--mode-option-id", "approval_mode"
    )
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
            assert session.gated
    (switch,) = fake_agent.frames_in("session/set_config_option")
    assert switch["params"]["configId"] == "approval_mode"
    assert switch["params"]["value"] == "ask"


@pytest.mark.anyio
async def test_the_asking_mode_is_set_again_after_session_load(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # --mode-stuck off, but the agent forgets modes on load: it starts in yolo each time
    spec = agent_spec(fake_agent, workspace, *_described(GEMINI, "yolo"), dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session_id = (await client.open_session()).session_id
        state = fake_agent.state_dir / "sessions" / f"{session_id}.json"
        data = json.loads(state.read_text())
        state.write_text(json.dumps({**data, "mode": "yolo"}))
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            loaded = await client.load_session(session_id)
            assert loaded.gated
    assert [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")] == [
        "default",
        "default",
    ]


@pytest.mark.anyio
async def test_a_switch_the_agent_does_not_confirm_refuses_the_session(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    for extra in (("--config-options", "--mode-stuck"), ("--mode-update", "--mode-stuck")):
        options = _described(GEMINI, "yolo", *extra)
        spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
        with anyio.fail_after(WAIT):
            async with open_test_client(spec, GatePlan(detect=True)) as client:
                with pytest.raises(AcpToolGateUnroutable) as caught:
                    await client.open_session()
                assert not client.sessions
        assert "did not confirm" in str(caught.value)
        assert "'default'" in str(caught.value)


@pytest.mark.anyio
async def test_a_current_mode_update_confirms_a_set_mode(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    options = _described(GEMINI, "yolo", "--mode-update")
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            assert (await client.open_session()).gated


@pytest.mark.anyio
async def test_with_the_opt_out_an_agent_without_an_asking_mode_starts_ungated(
    fake_agent: FakeAgent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = agent_spec(fake_agent, workspace, "--modes", "yolo", dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True, allow_ungated=True)) as client:
            session = await client.open_session()
            assert not session.gated
    assert "tool approval is OFF" in caplog.text
    assert not fake_agent.frames_in("session/set_mode")


# ---- through the CLI ------------------------------------------------------------------------
def test_the_agent_mode_setting_overrides_detection(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    command = fake_agent.command(*_described(VIBE, "accept-edits"), dialect="generic")
    result = run_cli(
        "ask",
        "--agent",
        "generic",
        "--agent-command",
        command,
        "hi",
        env={"SWITCHBOARD_AGENT_MODE": "plan"},
    )
    assert result.returncode == 0, result.stderr
    assert [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")] == ["plan"]


def test_an_unknown_agent_mode_is_refused_naming_the_modes_offered(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    command = fake_agent.command(*_described(VIBE, "accept-edits"), dialect="generic")
    result = run_cli(
        "ask",
        "--agent",
        "generic",
        "--agent-command",
        command,
        "hi",
        env={"SWITCHBOARD_AGENT_MODE": "careful"},
    )
    assert result.returncode == 1
    assert "SWITCHBOARD_AGENT_MODE names the mode 'careful'" in result.stderr
    assert "'accept-edits', 'ask', 'plan'" in result.stderr
    assert not fake_agent.frames_in("session/prompt")


def test_gemini_like_agent_answers_ask_in_its_default_mode(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    command = fake_agent.command(*_described(GEMINI, "yolo"), dialect="generic")
    result = run_cli("ask", "--agent", "generic", "--agent-command", command, "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: hi\n"


@pytest.mark.anyio
async def test_a_switch_confirmed_by_its_answer_alone_is_the_mode_the_session_shows(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # set_mode answers `{}` and no current_mode_update follows: /status must not show the
    # mode the gate just left
    spec = agent_spec(fake_agent, workspace, *_described(GEMINI, "yolo"), dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, GatePlan(detect=True)) as client:
            session = await client.open_session()
    assert session.gated and session.state.mode == "default"
