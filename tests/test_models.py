"""Models as the agent describes them: a config option of category "model" whatever its id,
grouped select options, switched with session/set_config_option and the option's own id;
session/set_model only for agents with the legacy `models` field; what the agent reports is
what /status and /model show, also after it changed the model itself; a resumed session keeps
its context when its model cannot be restored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp import AcpModelChoiceUnsupported
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


def llm_option(current: str) -> dict[str, Any]:
    """A model picker named "llm", its choices in provider groups."""
    return {
        "id": "llm",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current,
        "options": [
            {"group": "anthropic", "name": "Anthropic", "options": [{"value": "sonnet"}]},
            {"group": "openai", "name": "OpenAI", "options": [{"value": "gpt-x", "name": "GPT"}]},
        ],
    }


EFFORT = {
    "id": "model",  # named "model", but it is not the model picker: its category says so
    "name": "Reasoning effort",
    "category": "thought_level",
    "type": "select",
    "currentValue": "low",
    "options": [{"value": "low"}, {"value": "high"}],
}
OPTIONS = json.dumps([EFFORT, llm_option("sonnet")])


async def test_the_model_option_is_found_by_category_and_set_with_its_own_id(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    spec = agent_spec(fake_agent, tmp_path, "--config-json", OPTIONS, dialect="generic")
    async with open_test_client(spec) as client:
        session = await client.open_session()
        assert session.models == ["sonnet", "gpt-x"]  # grouped options, flattened
        assert session.model == "sonnet"
        await session.set_model("gpt-x")
        assert session.model == "gpt-x"  # as the agent's answer lists it
    (frame,) = fake_agent.frames_in("session/set_config_option")
    assert frame["params"]["configId"] == "llm" and frame["params"]["value"] == "gpt-x"
    assert fake_agent.frames_in("session/set_model") == []


async def test_the_model_the_agent_switches_to_itself_is_the_one_reported(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    switched = script(
        {"chunk": "switching"},
        {
            "update": {
                "sessionUpdate": "config_option_update",
                "configOptions": [llm_option("gpt-x")],
            }
        },
    )
    spec = agent_spec(fake_agent, tmp_path, "--config-json", OPTIONS, dialect="generic")
    async with open_test_client(spec) as client:
        session = await client.open_session()
        await collect_turn(session, switched)
        assert session.model == "gpt-x"


async def test_set_model_is_only_for_agents_with_the_legacy_models_field(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    legacy = agent_spec(fake_agent, tmp_path, "--models", "a,b", dialect="generic")
    async with open_test_client(legacy) as client:
        session = await client.open_session()
        await session.set_model("b")
        assert session.model == "b"
    (frame,) = fake_agent.frames_in("session/set_model")
    assert frame["params"]["modelId"] == "b"

    silent = agent_spec(fake_agent, tmp_path, dialect="generic")
    async with open_test_client(silent) as client:
        session = await client.open_session()
        with pytest.raises(AcpModelChoiceUnsupported) as caught:
            await session.set_model("b")
    assert caught.value.model == "b"
    assert str(caught.value).startswith("The agent does not offer a way to choose its model")
    assert len(fake_agent.frames_in("session/set_model")) == 1  # nothing more was sent


async def test_status_and_model_show_what_the_agent_reports_after_it_switched(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    switched = script(
        {"chunk": "switching"},
        {
            "update": {
                "sessionUpdate": "config_option_update",
                "configOptions": [llm_option("gpt-x")],
            }
        },
    )
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--config-json", OPTIONS)
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", switched)))
        await finished(surface.post(surface.message("alice", "/status")))
        await finished(surface.post(surface.message("alice", "/model")))
    shown = surface.transcript()
    assert "Model: GPT (gpt-x)" in shown  # by its name in the option, with its id
    assert "Models: sonnet, gpt-x (current)" in shown


def offering(*models: str) -> str:
    option = {"id": "model", "category": "model", "currentValue": "a"}
    return json.dumps([{**option, "options": [{"value": m} for m in models]}])


async def test_a_resumed_session_keeps_its_context_when_its_model_is_no_longer_offered(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    first = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--config-json", offering("a", "b"))
    async with running_app(settings, first):
        await finished(first.post(first.message("alice", "/model b")))
        await finished(first.post(first.message("alice", "remember")))
    assert "Model set to b." in first.transcript()
    assert len(fake_agent.frames_in("session/set_config_option")) == 1

    second = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--config-json", offering("a"))
    async with running_app(settings, second):
        await finished(second.post(second.message("alice", "again", event_id="after-restart")))
    shown = second.transcript()
    assert "The model b is not offered after resuming; using a." in shown
    assert "Earlier context" not in shown  # resumed, not a new session
    assert "Echo: again" in shown
    assert len(fake_agent.frames_in("session/new")) == 1
    assert len(fake_agent.frames_in("session/load")) == 1
    assert len(fake_agent.frames_in("session/set_config_option")) == 1  # not re-sent


async def test_a_failed_model_restore_after_resuming_is_one_notice_not_a_new_session(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    first = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--config-json", offering("a", "b"))
    async with running_app(settings, first):
        await finished(first.post(first.message("alice", "/model b")))
        await finished(first.post(first.message("alice", "remember")))

    second = ScriptedSurface()
    refusing = ("--config-json", offering("a", "b"), "--config-refuse", "b")
    async with running_app(engine_settings(tmp_path, fake_agent, *refusing), second):
        await finished(second.post(second.message("alice", "again", event_id="after-restart")))
        await finished(second.post(second.message("alice", "/status", event_id="status")))
    shown = second.transcript()
    assert shown.count("The model b could not be restored; using a.") == 1
    assert "Earlier context" not in shown and "Echo: again" in shown
    assert "Model: a" in shown  # what the agent reports, not what we asked for
    assert len(fake_agent.frames_in("session/new")) == 1
    assert len(fake_agent.frames_in("session/set_config_option")) == 2  # set once, tried once
