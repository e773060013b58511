"""Session state the agent sends outside a prompt (right after session/new, between turns, during
a session/load) is kept in `AcpSession.state`, bounded, and shown by /help and /status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp import SessionState, get_backend
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


def update(variant: str, **fields: Any) -> dict[str, Any]:
    return {"method": "session/update", "params": {"update": {"sessionUpdate": variant, **fields}}}


COMMANDS = update(
    "available_commands_update",
    availableCommands=[
        {"name": "review", "description": "Review the diff", "input": {"hint": "PATH"}},
        {"name": "status", "description": "The agent's own status"},
    ],
)
AFTER_NEW = [
    COMMANDS,
    update("usage_update", used=5000, size=200000),
    update("session_info_update", title="Fixing the parser"),
    update("current_mode_update", currentModeId="ask"),
]


async def test_state_sent_right_after_session_new_is_kept_before_the_first_prompt(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    spec = agent_spec(fake_agent, tmp_path, "--after-new", json.dumps(AFTER_NEW), dialect="generic")
    async with open_test_client(spec) as client:
        session = await client.open_session()
        state = session.state
        await wait_for(lambda: state.title, "the title sent after session/new")
        assert state.command_names == ("review", "status")
        assert state.commands[0].hint == "PATH"
        assert state.usage is not None and (state.usage.used, state.usage.size) == (5000, 200000)
        assert state.mode == "ask"
        assert state.title == "Fixing the parser"


async def test_state_sent_between_turns_is_kept(tmp_path: Path, fake_agent: FakeAgent) -> None:
    late = script(
        {"chunk": "ok"},
        {"stop": "end_turn"},
        {"sleep": 0.05},
        {"update": COMMANDS["params"]["update"]},
        {"update": {"sessionUpdate": "session_info_update", "title": "After the turn"}},
    )
    spec = agent_spec(fake_agent, tmp_path, dialect="generic")
    async with open_test_client(spec) as client:
        session = await client.open_session()
        await collect_turn(session, late)
        await wait_for(lambda: session.state.title, "the title sent after the turn")
        assert session.state.command_names == ("review", "status")
        assert session.state.title == "After the turn"
        events = await collect_turn(session, "again")  # the next turn is not disturbed
        assert "".join(e.text for e in events).startswith("Echo: again")


async def test_state_sent_while_a_session_loads_is_kept(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    spec = agent_spec(
        fake_agent, tmp_path, "--after-new", json.dumps([COMMANDS]), dialect="generic"
    )
    async with open_test_client(spec) as client:
        session_id = (await client.open_session()).session_id
    async with open_test_client(spec) as client:
        loaded = await client.load_session(session_id)
        await wait_for(lambda: loaded.state.commands, "the commands sent after session/load")
        assert loaded.state.command_names == ("review", "status")


def test_what_an_agent_can_send_is_bounded_and_cleaned() -> None:
    state = SessionState(get_backend("generic"))
    many = [{"name": f"cmd{i}", "description": "d" * 5000} for i in range(500)]
    many[0] = {"name": "/bad name\u202e"}  # spaces and control characters: not a command
    many[1] = {"name": "x" * 65}
    state.apply(
        "session/update", update("available_commands_update", availableCommands=many)["params"]
    )
    assert 0 < len(state.commands) <= 100
    assert all(len(c.description) <= 200 for c in state.commands)
    assert "bad name" not in " ".join(state.command_names)
    assert all(len(name) <= 64 for name in state.command_names)
    title = "t\x1b[31m" + "t" * 1000
    state.apply("session/update", update("session_info_update", title=title)["params"])
    assert len(state.title) <= 200 and "\x1b" not in state.title
    state.apply("session/update", {"update": "not an object"})  # ignored, never raises
    state.apply("session/update", update("usage_update", used=-1, size="big")["params"])
    assert state.usage is not None and state.usage.used is None and state.usage.size is None


async def test_help_and_status_show_the_state_sent_before_the_first_prompt(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--after-new", json.dumps(AFTER_NEW))
    async with running_app(settings, surface) as app:
        await finished(surface.post(surface.message("alice", "hello")))
        session = app.runners[next(iter(app.runners))].sessions.current
        assert session is not None
        await wait_for(lambda: session.state.title, "the state sent after session/new")
        await finished(surface.post(surface.message("alice", "/help")))
        await finished(surface.post(surface.message("alice", "/status")))
        shown = surface.transcript()
        assert "The agent also understands: /review, //status" in shown
        assert "//status sends it /status" in shown
        assert "Context: 5,000 of 200,000 tokens (2%)" in shown
        assert "Mode: ask" in shown and "Title: Fixing the parser" in shown
        await finished(surface.post(surface.message("alice", "//status")))
    assert fake_agent.prompt_texts()[-1] == "/status"  # the agent's own, not ours
