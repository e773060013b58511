"""The REAL claude-agent-acp's AskUserQuestion through acp (AcpClient, AcpSession, the turn's
ELICITATION event), offline against the loopback mock model (`SCN_ASK`): the form is read into
fields a surface can ask (a single choice, then an optional free text), a person's typed number
is read into the option's value, and that answer reaches the model; a turn stopped while the
question waits answers it `cancel`.

The wire itself is pinned by tests/test_real_agent_steer_ask.py. `bash
tests/fakes/install_agents.sh` installs the agent; without it these tests fail with that hint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from acp import (
    ELICITATION_ACCEPT,
    AcpEvent,
    AcpSession,
    ElicitationAnswer,
    EventKind,
    PendingElicitation,
    RuntimeSpec,
    get_backend,
)
from tests.acp_helpers import open_test_client
from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_ASK_ANSWERED,
    MOCK_ASK_HEADER,
    MOCK_ASK_OPTIONS,
    MOCK_ASK_QUESTION,
    MockModelServer,
)

BOUND = 120  # seconds for one real agent start and turn on a loaded machine: a bound

Answer = Callable[[AcpSession, PendingElicitation], Awaitable[None]]


@pytest.fixture
def mock_model() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def claude_spec(tmp_path: Path, mock: MockModelServer) -> RuntimeSpec:
    argv = real_agents.claude_acp_argv()
    if argv is None:
        pytest.fail("claude-agent-acp is not installed; run: bash tests/fakes/install_agents.sh")
    home, workspace = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workspace.mkdir()
    return RuntimeSpec(
        backend=get_backend("claude"),
        argv=tuple(argv),
        workspace=workspace,
        env=real_agents.claude_env_mock(home, mock.url),
    )


async def ask_turn(
    tmp_path: Path, mock: MockModelServer, answer: Answer
) -> tuple[list[AcpEvent], list[PendingElicitation]]:
    events: list[AcpEvent] = []
    asked: list[PendingElicitation] = []
    with anyio.fail_after(BOUND):
        async with open_test_client(claude_spec(tmp_path, mock)) as client:
            session = await client.open_session()
            async with aclosing(session.prompt("SCN_ASK choose a colour")) as stream:
                async for event in stream:
                    events.append(event)
                    if event.kind is EventKind.ELICITATION:
                        assert event.elicitation is not None
                        asked.append(event.elicitation)
                        await answer(session, event.elicitation)
    return events, asked


def said(events: list[AcpEvent]) -> str:
    return "".join(e.text or "" for e in events if e.kind is EventKind.TEXT)


@pytest.mark.anyio
async def test_claudes_question_is_a_choice_and_an_optional_text_and_a_typed_number_answers_it(
    tmp_path: Path, mock_model: MockModelServer
) -> None:
    async def typed_two(session: AcpSession, pending: PendingElicitation) -> None:
        choice = pending.request.fields[0]
        pending.respond(ElicitationAnswer(ELICITATION_ACCEPT, {choice.name: choice.read("2")}))

    events, asked = await ask_turn(tmp_path, mock_model, typed_two)
    (pending,) = asked
    request = pending.request
    assert request.mode == "form" and request.message == MOCK_ASK_QUESTION
    tool_calls = {e.tool.tool_call_id for e in events if e.tool is not None}
    assert request.tool_call_id in tool_calls
    choice, other = request.fields
    assert (choice.name, choice.title, choice.kind) == ("question_0", MOCK_ASK_HEADER, "choice")
    assert choice.choices == tuple((label, label) for label in MOCK_ASK_OPTIONS)
    assert (other.name, other.title, other.kind) == ("question_0_custom", "Other", "string")
    assert not choice.required and not other.required
    assert not [e for e in events if e.kind is EventKind.PERMISSION]
    assert events[-1].kind is EventKind.TERMINAL and events[-1].stats is not None
    assert events[-1].stats.stop_reason == "end_turn"
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert f'"{MOCK_ASK_QUESTION}"="Blue"' in answered[0].tool_results[-1]
    assert MOCK_ASK_ANSWERED in said(events) and '="Blue"' in said(events)


@pytest.mark.anyio
async def test_a_turn_stopped_while_the_question_waits_answers_it_cancel(
    tmp_path: Path, mock_model: MockModelServer
) -> None:
    async def stop(session: AcpSession, pending: PendingElicitation) -> None:
        assert session.turn is not None
        await session.turn.cancel(grace=5.0)

    events, asked = await ask_turn(tmp_path, mock_model, stop)
    (pending,) = asked
    assert pending.answered and pending.answer is not None
    assert pending.answer.action == "cancel"
    assert events[-1].kind is EventKind.TERMINAL and events[-1].stats is not None
    assert events[-1].stats.stop_reason == "cancelled"
