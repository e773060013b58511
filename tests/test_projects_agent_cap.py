"""The agent cap (`SWITCHBOARD_MAX_AGENTS`) end to end on Telegram: two projects, two scripted
agents, a cap of one live agent. A busy agent makes the other project's message wait, with one
line; an idle one is stopped to make room, and its conversation resumes later with
`session/load`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import FakeAgent
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving
from tests.test_projects_e2e import ALICE, CAROL, GROUP, calls, prompts, shows, tg_settings


@pytest.fixture
async def tg_api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


WAIT_LINE = "The agent is busy in another conversation; your message waits for it."


def started(fake_agent: FakeAgent) -> list[str]:
    """The dialect of each agent process started, in order."""
    return [
        r["argv"][r["argv"].index("--dialect") + 1]
        for r in fake_agent.records()
        if r.get("event") == "start"
    ]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_a_busy_agent_at_the_cap_makes_the_other_project_wait_with_one_line(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    settings = tg_settings(tmp_path, fake_agent, api, monkeypatch).model_copy(
        update={"max_agents": 1}
    )
    hanging = 'SCRIPT:[{"chunk": "working on it"}, {"hang": true}]'
    async with serving(settings):
        api.dm(CAROL, "/project web")
        await wait_for(shows(api, CAROL.id, "Switched to project web"), "carol's switch", 15)
        api.dm(ALICE, hanging)  # project api (the default): web's idle agent makes room
        await wait_for(
            lambda: any(
                "working on it" in call.params.get("text", "")
                for call in api.calls_to("sendMessageDraft")
            ),
            "alice's live reply",
            15,
        )
        api.dm(CAROL, "hello web")
        await wait_for(shows(api, CAROL.id, WAIT_LINE), "the wait line", 15)
        assert started(fake_agent) == ["claude", "kiro"]  # nothing spawned past the cap
        api.dm(ALICE, "/stop")
        await wait_for(shows(api, CAROL.id, "Echo: hello web"), "carol's answer", 20)
    assert api.chat_text(CAROL.id).count(WAIT_LINE) == 1
    assert started(fake_agent) == ["claude", "kiro", "claude"]
    assert prompts(fake_agent)[-1] == ("claude", "hello web")


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_an_idle_agent_at_the_cap_is_stopped_for_room_and_its_conversation_resumes(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    settings = tg_settings(tmp_path, fake_agent, api, monkeypatch).model_copy(
        update={"max_agents": 1}
    )
    async with serving(settings):
        api.dm(ALICE, "first in api")
        await wait_for(shows(api, ALICE.id, "Echo: first in api"), "alice's answer", 15)
        api.dm(CAROL, "/project web")
        await wait_for(shows(api, CAROL.id, "Switched to project web"), "carol's switch", 15)
        api.dm(CAROL, "hello web")
        await wait_for(shows(api, CAROL.id, "Echo: hello web"), "carol's answer", 20)
        api.dm(ALICE, "again in api")
        await wait_for(shows(api, ALICE.id, "Echo: again in api"), "alice's second answer", 20)
    assert WAIT_LINE not in api.chat_text(CAROL.id) + api.chat_text(ALICE.id)
    assert started(fake_agent) == ["kiro", "claude", "kiro"]  # each stopped for the other
    loads = calls(fake_agent, "session/load")
    assert [dialect for dialect, _ in loads] == ["kiro"]  # alice's session came back
