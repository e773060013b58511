"""The retry ladder's budgets (bot/ladder.py) with agents that retry themselves: `--timeout` bounds
the whole turn, retries and backoff included, and an attempt that already took long before a
transient error is not started over; an agent still busy with an earlier prompt gets the prompt
once more on a fresh session, where the caller can start one. Against the scripted fake agent."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
import stamina

from acp import AcpError, AcpEvent, AcpPromptBusy, AcpSession, PendingPermission
from bot.ladder import RetryPolicy, run_turn
from tests.acp_helpers import agent_spec, open_test_client
from tests.conftest import FakeAgent, script

pytestmark = pytest.mark.anyio
WAIT = 30  # seconds: an upper bound, never a measurement
OVERLOADED = {"error": {"code": -32603, "message": "Internal error: the model is overloaded"}}


class OneSession:
    def __init__(self, session: AcpSession) -> None:
        self._session = session

    async def session(self) -> AcpSession:
        return self._session

    async def reset(self) -> None:
        return None


class Quiet:
    def on_text(self, text: str) -> None:
        return None

    async def on_event(self, event: AcpEvent) -> None:
        return None

    async def on_permission(self, pending: PendingPermission) -> str | None:
        return None

    def on_retry(self, error: AcpError, delay: float) -> None:
        return None


async def failing_turn(
    agent: FakeAgent, workspace: Path, steps: str, policy: RetryPolicy, timeout: float | None
) -> AcpError:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(agent, workspace)) as client:
            session = await client.open_session()
            with pytest.raises(AcpError) as caught:
                await run_turn(OneSession(session), steps, Quiet(), policy=policy, timeout=timeout)
    return caught.value


async def test_no_retry_starts_that_the_turns_time_limit_leaves_no_room_for(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # backoff 2 s, then 4 s: the second wait would end past the 5 s limit
    policy = RetryPolicy(transient_retries=5, base_delay=2.0, jitter=0.0)
    error = await failing_turn(fake_agent, workspace, script(OVERLOADED), policy, timeout=5.0)
    assert len(fake_agent.prompt_texts()) == 2
    assert error.retries == 1
    assert "time limit of 5 s left no time to try again" in str(error)
    assert str(error)[0].isupper() and "1 automatic retry" in str(error)


async def test_a_transient_error_after_a_long_silent_attempt_is_not_started_over(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    steps = script({"sleep": 0.6}, OVERLOADED)
    policy = RetryPolicy(transient_retries=3, base_delay=0.01, long_attempt=0.5)
    error = await failing_turn(fake_agent, workspace, steps, policy, timeout=None)
    assert len(fake_agent.prompt_texts()) == 1
    assert re.search(r"already spent \d+ s on it, retrying on its own", str(error))
    assert error.retries == 0 and "automatic retr" not in str(error)


async def test_a_short_attempt_that_fails_the_same_way_is_retried(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    steps = script({"sleep": 0.6}, OVERLOADED)
    policy = RetryPolicy(transient_retries=1, base_delay=0.01, long_attempt=30.0)
    error = await failing_turn(fake_agent, workspace, steps, policy, timeout=None)
    assert len(fake_agent.prompt_texts()) == 2
    assert error.retries == 1 and "already spent" not in str(error)


BUSY = {
    "error": {"code": -32603, "message": "Internal error", "data": "prompt already in progress"}
}


async def busy_turn(
    agent: FakeAgent, workspace: Path, steps: str, renewed: list[str] | None
) -> AcpError | None:
    """`steps` against a session whose agent may stay busy; `renewed` (when given) records each
    fresh session the ladder asks for. The ladder's waits are zero (stamina's test mode)."""

    async def renew() -> None:
        assert renewed is not None
        renewed.append("fresh")

    with stamina.set_testing(True, attempts=10), anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(agent, workspace)) as client:
            session = await client.open_session()
            try:
                await run_turn(
                    OneSession(session),
                    steps,
                    Quiet(),
                    policy=RetryPolicy(),
                    renew=None if renewed is None else renew,
                )
            except AcpError as exc:
                return exc
    return None


async def test_a_busy_agent_gets_the_prompt_once_more_on_a_fresh_session(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    renewed: list[str] = []
    steps = script({"attempts": [[BUSY], [BUSY], [BUSY], [{"chunk": "got through"}]]})
    assert await busy_turn(fake_agent, workspace, steps, renewed) is None
    assert renewed == ["fresh"]
    assert len(fake_agent.prompt_texts()) == 4  # the busy budget, then the one replay


async def test_the_replay_on_a_fresh_session_happens_once(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    renewed: list[str] = []
    error = await busy_turn(fake_agent, workspace, script(BUSY), renewed)
    assert isinstance(error, AcpPromptBusy)
    assert renewed == ["fresh"]
    assert len(fake_agent.prompt_texts()) == 6  # twice the busy budget, no more
    assert error.retries == 2


async def test_without_a_way_to_a_fresh_session_the_busy_budget_ends_the_turn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    error = await busy_turn(fake_agent, workspace, script(BUSY), None)
    assert isinstance(error, AcpPromptBusy)
    assert len(fake_agent.prompt_texts()) == 3
