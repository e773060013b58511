"""Steer now through Switchboard with the REAL claude-agent-acp against the loopback mock model
(scenario `SCN_STEER`: a slow reply until a request carries text injected into the turn): the
Queued acknowledgement offers Steer now (claude advertises steering), the press puts the text
into the running turn (the mock sees it in that turn), and the reply goes on in the same live
message with the person's quoted line before the model's answer to it.
`bash tests/fakes/install_agents.sh` installs the agent; without it this test fails saying so."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bot.busy import QUEUED, STEERED
from tests.conftest import AGENT_ENV_NAMES, FakeAgent
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for
from tests.fakes import real_agents
from tests.fakes.mock_model import MOCK_SLOW_PREFIX, MOCK_STEER_SEEN, MockModelServer
from tests.test_busy_mode import ack_of

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

STEER_TEXT = "No, use the other file instead"
BOUND = 120.0  # one real agent start and a slow turn on a loaded 2-core machine; never measured


async def test_steer_now_reaches_claude_in_the_same_turn_and_shows_in_its_live_reply(
    tmp_path: Path, fake_agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = real_agents.claude_acp_argv()
    if argv is None:
        pytest.fail("claude-agent-acp is not installed; run: bash tests/fakes/install_agents.sh")
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "work"
    workspace.mkdir()
    surface = ScriptedSurface(message_buttons=True)
    with MockModelServer(slow_interval=0.2, slow_duration=20) as mock:
        for name, value in real_agents.claude_env_mock(home, mock.url).items():
            monkeypatch.setenv(name, value)
        settings = engine_settings(
            tmp_path,
            fake_agent,
            agent="claude",
            agent_command=shlex.join(argv),
            agent_env=[*AGENT_ENV_NAMES, "HOME"],
            agent_sandbox="off",
            workspace=workspace,
            request_timeout=30,
            initialize_timeout=30,
        )
        async with running_app(settings, surface):
            turn = surface.post(surface.message("alice", "SCN_STEER write the report"))
            await wait_for(
                lambda: MOCK_SLOW_PREFIX in surface.transcript(), "the slow reply", BOUND
            )
            waiting = surface.post(surface.message("alice", STEER_TEXT))
            await wait_for(
                lambda: any(t.startswith(QUEUED) for t in surface.shown().values()), "ack"
            )
            (steer,) = [b for b in ack_of(surface)[2] if b.label == "Steer now"]
            await finished(surface.post(surface.press("alice", steer.token)), waiting)
            await finished(turn, timeout=BOUND)
        seen = [r for r in mock.filtered(scenario="SCN_STEER") if r.response == "steer_seen"]
    assert seen and seen[0].injected_texts == [STEER_TEXT]
    assert ack_of(surface)[1] == f"{QUEUED}\n{STEERED}"
    final = surface.transcript()
    quote = f"> **Alice:** {STEER_TEXT}"
    assert quote in final and f"{MOCK_STEER_SEEN} {STEER_TEXT}" in final
    assert final.index(MOCK_SLOW_PREFIX) < final.index(quote) < final.index(MOCK_STEER_SEEN)
