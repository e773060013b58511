"""kiro-cli's `_kiro.dev/...` extensions, spoken by the scripted agent in its kiro dialect: the
command menu, context use and credits, compaction, MCP sign-in links, MCP start-up failures and
agent switches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


def kiro(method: str, **params: Any) -> dict[str, Any]:
    return {"notify": {"method": f"_kiro.dev/{method}", "params": params}}


async def test_the_kiro_command_menu_is_the_agents_commands_before_the_first_prompt(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    menu = {
        "method": "_kiro.dev/commands/available",
        "params": {"commands": [{"name": "context"}, {"name": "/model"}, {"name": "tools"}]},
    }
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--after-new", json.dumps([menu]))
    async with running_app(settings, surface) as app:
        await finished(surface.post(surface.message("alice", "hello")))
        runner = next(iter(app.runners.values()))
        await wait_for(lambda: runner.agent_commands, "kiro's command menu")
        await finished(surface.post(surface.message("alice", "/help")))
    assert "The agent also understands: /context, //model, /tools" in surface.transcript()


async def test_kiro_metadata_between_turns_shows_context_and_credits_in_status(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    late_metadata = script(
        {"chunk": "ok"},
        {"stop": "end_turn"},
        {"sleep": 0.05},
        kiro(
            "metadata",
            contextUsagePercentage=63.4,
            meteringUsage=[{"unit": "credit", "unitPlural": "credits", "value": 0.37}],
        ),
    )
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        await finished(surface.post(surface.message("alice", late_metadata)))
        runner = next(iter(app.runners.values()))
        session = runner.sessions.current
        assert session is not None
        await wait_for(lambda: session.state.credits is not None, "the late metadata")
        await finished(surface.post(surface.message("alice", "/status")))
    shown = surface.transcript()
    assert "Context: 63% used" in shown
    assert "Credits used: 0.37" in shown


async def test_compaction_started_completed_and_failed_are_one_notice_each(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    compaction = script(
        kiro("compaction/status", status="started"),
        kiro("compaction/status", status="completed"),
        kiro(
            "compaction/status",
            status="failed",
            error={"httpStatusCode": 429, "message": "ThrottlingException: Too many requests"},
        ),
        kiro("compaction/status", status="failed", reason="The conversation is too short"),
        {"chunk": "done"},
    )
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", compaction)))
        await wait_for(lambda: "too short" in surface.transcript(), "the last compaction notice")
    shown = surface.transcript()
    assert shown.count("The agent is compacting the conversation to free context.") == 1
    assert shown.count("The agent finished compacting the conversation.") == 1
    failures = [line for line in shown.splitlines() if line.startswith("Compacting")]
    assert len(failures) == 2, failures
    throttled, short = failures
    assert "try /compact again in a moment" in throttled  # 429: transient, as the facts say
    assert "too short" in short and "again" not in short  # no facts of a passing failure
    assert "Traceback" not in shown


async def test_an_mcp_sign_in_link_is_shown_once_per_server_to_the_requester(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    link = "https://auth.example.com/authorize?client_id=abc&state=xyz"
    sign_in = script(
        kiro("mcp/oauth_request", serverName="github", oauthUrl=link),
        kiro("mcp/oauth_request", serverName="github", oauthUrl=link),  # again: not repeated
        kiro("mcp/oauth_request", serverName="evil", oauthUrl="javascript:alert(1)"),
        kiro("mcp/oauth_request", serverName="local", oauthUrl="file:///etc/passwd"),
        {"chunk": "ok"},
    )
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", sign_in)))
        await wait_for(lambda: link in surface.transcript(), "the sign-in link")
        await finished(surface.post(surface.message("alice", "/status")))
    shown = surface.transcript()
    assert shown.count(link) == 1
    assert f"For Alice: the MCP server github needs you to sign in at {link}" in shown
    assert "javascript:" not in shown and "file://" not in shown
    assert "evil" not in shown and "local" not in shown


async def test_an_mcp_start_up_failure_and_an_agent_switch_are_one_line_each(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    frames = script(
        kiro("mcp/server_init_failure", serverName="jira", error="spawn npx ENOENT"),
        kiro("agent/switched", agentName="reviewer"),
        {"chunk": "ok"},
    )
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", frames)))
        await wait_for(lambda: "reviewer" in surface.transcript(), "the switch notice")
    shown = surface.transcript()
    assert shown.count("The agent could not start the MCP server jira: spawn npx ENOENT.") == 1
    assert shown.count("The agent switched to reviewer.") == 1
