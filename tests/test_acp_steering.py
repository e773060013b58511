"""Steering (issue 24): a message injected into the running turn through `_session/steering`, only
for an agent that advertises it, against the scripted fake agent (`--steering`, claude-agent-acp's
wire shape: tests/fakes/fake_agent.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    AcpEvent,
    AcpSession,
    AcpSteeringUnsupported,
    EventKind,
    RuntimeSpec,
    SteerOutcome,
    get_backend,
)
from acp.steering import STEER_META, STEER_METHOD, advertises_steering, read_outcome
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script
from tests.fakes import real_agents
from tests.fakes.mock_model import MockModelServer

WAIT = 30  # seconds: an upper bound, never a measurement

# The turn says "working", then waits (up to 20 s) for a steer and says what it got.
STEERABLE = script(
    {"chunk": "working"},
    {"await_steer": 20},
    {"chunk": " done"},
    {"stop": "end_turn"},
)


async def _steer_at_first_text(
    session: AcpSession, prompt: Any, outcomes: list[SteerOutcome]
) -> list[AcpEvent]:
    async def on_event(event: AcpEvent) -> None:
        if event.kind is EventKind.TEXT and not outcomes:
            outcomes.append(await session.steer(prompt))

    return await collect_turn(session, STEERABLE, on_event=on_event)


@pytest.mark.anyio
async def test_a_steer_reaches_the_running_turn_and_its_output_stays_in_that_turn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    outcomes: list[SteerOutcome] = []
    spec = agent_spec(fake_agent, workspace, "--steering", dialect="claude")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            assert session.steering
            events = await _steer_at_first_text(session, "no, use the other file", outcomes)
            assert session.turn is None and session.turns == 1
    assert outcomes == [SteerOutcome.INJECTED]
    assert texts(events) == ["working", "steered:no, use the other file", " done"]
    assert events[-1].kind is EventKind.TERMINAL
    assert events[-1].stats is not None and events[-1].stats.stop_reason == "end_turn"
    (steer,) = fake_agent.frames_in("_session/steering")
    assert steer["params"]["prompt"] == [{"type": "text", "text": "no, use the other file"}]
    assert steer["params"]["sessionId"] == session.session_id
    # claude-agent-acp then answers an idle steer `promptRequired` instead of starting a turn
    assert steer["params"]["_meta"] == {"steering": {"idleBehavior": "promptRequired"}}
    # one prompt: the steer was not sent as another
    assert len(fake_agent.frames_in("session/prompt")) == 1


@pytest.mark.anyio
async def test_content_blocks_are_steered_as_they_are(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    blocks = [{"type": "text", "text": "look at"}, {"type": "text", "text": "b.py"}]
    outcomes: list[SteerOutcome] = []
    spec = agent_spec(fake_agent, workspace, "--steering", dialect="claude")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events = await _steer_at_first_text(session, blocks, outcomes)
    assert outcomes == [SteerOutcome.INJECTED]
    assert "steered:look at b.py" in texts(events)
    (steer,) = fake_agent.frames_in("_session/steering")
    assert steer["params"]["prompt"] == blocks


@pytest.mark.anyio
async def test_an_agent_that_does_not_advertise_steering_is_never_asked(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    refused: list[AcpSteeringUnsupported] = []
    spec = agent_spec(fake_agent, workspace, dialect="claude")

    async def on_event(event: AcpEvent) -> None:
        if event.kind is EventKind.TEXT and not refused:
            with pytest.raises(AcpSteeringUnsupported) as caught:
                await session.steer("wait")
            refused.append(caught.value)

    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            assert not session.steering
            events = await collect_turn(
                session, script({"chunk": "working"}, {"await_steer": 0.2}), on_event=on_event
            )
            with pytest.raises(AcpSteeringUnsupported):
                await session.steer("and idle")
    (error,) = refused
    assert error.agent == "fake-agent"  # its agentInfo name
    assert "does not advertise steering" in str(error)
    assert texts(events) == ["working", "steered:none"]
    assert fake_agent.frames_in("_session/steering") == []
    assert not [r for r in fake_agent.records() if r.get("event") == "steer_unadvertised"]


@pytest.mark.anyio
async def test_with_no_turn_running_it_is_a_prompt_without_asking_the_agent(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, "--steering", dialect="claude")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            assert await session.steer("hello") is SteerOutcome.PROMPT_REQUIRED
            await collect_turn(session, script({"chunk": "a turn"}))
            assert await session.steer("after it") is SteerOutcome.PROMPT_REQUIRED
    assert fake_agent.frames_in("_session/steering") == []


@pytest.mark.anyio
async def test_the_agent_answering_prompt_required_is_told_and_the_turn_goes_on(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # The agent's turn is over on its side while ours still waits for its answer (the race
    # the agent's `promptRequired` is for): the steer is handed back, the turn untouched.
    outcomes: list[SteerOutcome] = []
    spec = agent_spec(fake_agent, workspace, "--steering", dialect="claude")

    async def on_event(event: AcpEvent) -> None:
        if event.kind is EventKind.TEXT and not outcomes:
            outcomes.append(await session.steer("too late"))
            assert session.turn is not None
            await session.turn.cancel(grace=0.2)

    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events = await collect_turn(
                session, script({"abandon": True, "then_chunk": "almost"}), on_event=on_event
            )
    assert outcomes == [SteerOutcome.PROMPT_REQUIRED]
    assert texts(events) == ["almost"]
    (record,) = [r for r in fake_agent.records() if r.get("event") == "steer"]
    assert record["outcome"] == "promptRequired"


@pytest.mark.anyio
async def test_claude_takes_a_steer_into_the_same_turn_and_hands_an_idle_one_back(
    tmp_path: Path, workspace: Path
) -> None:
    """Real claude-agent-acp against the loopback mock model: the model's next request in the
    running turn carries the steered text; with no turn running, claude answers
    `promptRequired` to the opt-in we send (rather than starting a turn of its own)."""
    argv = real_agents.argv_or_skip("claude")
    home = tmp_path / "home"
    home.mkdir()
    marker = "STEERED-7f3a use the other file"
    outcomes: list[SteerOutcome] = []
    with MockModelServer(slow_interval=0.2, slow_duration=6) as mock:
        spec = RuntimeSpec(
            backend=get_backend("claude"),
            argv=tuple(argv),
            workspace=workspace,
            env=real_agents.claude_env_mock(home, mock.url),
        )

        async def on_event(event: AcpEvent) -> None:
            if event.kind is EventKind.TEXT and not outcomes:
                outcomes.append(await session.steer(marker))

        with anyio.fail_after(120):
            async with open_test_client(spec) as client:
                session = await client.open_session()
                assert session.steering
                events = await collect_turn(session, "SCN_SLOW go", on_event=on_event)
                steered = [r for r in mock.requests if r.scenario and marker in json.dumps(r.body)]
                assert session.turn is None
                assert await session.steer("and now?") is SteerOutcome.PROMPT_REQUIRED
                # what claude itself answers an idle steer carrying our opt-in (`steer` does
                # not ask when no turn runs; the agent's turn may end first all the same)
                params = {
                    "sessionId": session.session_id,
                    "prompt": [{"type": "text", "text": "and now?"}],
                    "_meta": STEER_META,
                }
                reply = await client.runtime.call(STEER_METHOD, params)
    assert outcomes == [SteerOutcome.INJECTED]
    assert steered, "the model never saw the steered text"
    assert events[-1].stats is not None and events[-1].stats.stop_reason == "end_turn"
    assert reply.error is None and read_outcome(reply.result) is SteerOutcome.PROMPT_REQUIRED


def test_steering_is_read_from_the_top_level_meta_or_the_capabilities() -> None:
    on = {"steering": {"supported": True}}
    assert advertises_steering({"_meta": on})
    assert advertises_steering({"agentCapabilities": {"_meta": on}})
    for off in (
        None,
        [],
        {},
        {"_meta": None},
        {"_meta": {"steering": True}},
        {"_meta": {"steering": {"supported": "true"}}},
        {"_meta": {"steering": {"supported": 1}}},
        {"agentCapabilities": {"steering": {"supported": True}}},
        {"agentCapabilities": "x", "_meta": []},
    ):
        assert not advertises_steering(off), off


def test_an_unknown_outcome_reads_as_prompt_required() -> None:
    assert read_outcome({"outcome": "injected"}) is SteerOutcome.INJECTED
    assert read_outcome({"outcome": "startedNewTurn"}) is SteerOutcome.STARTED_NEW_TURN
    assert read_outcome({"outcome": "promptRequired", "reason": "x"}) is (
        SteerOutcome.PROMPT_REQUIRED
    )
    for odd in (None, {}, {"outcome": "queued"}, {"outcome": 1}, {"outcome": ["injected"]}, "x"):
        assert read_outcome(odd) is SteerOutcome.PROMPT_REQUIRED, odd
