"""`AcpClient.session_capabilities` and `list_sessions` against the scripted fake agent: asked
only when advertised, every page read, the workspace's sessions with their titles."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp import AcpSessionListUnsupported, SessionCapabilities
from tests.acp_helpers import agent_spec, open_test_client
from tests.conftest import FakeAgent

pytestmark = pytest.mark.anyio


async def test_an_agent_without_the_capability_is_never_asked(
    fake_agent: FakeAgent, tmp_path: Path
) -> None:
    async with open_test_client(agent_spec(fake_agent, tmp_path)) as client:
        assert client.session_capabilities == SessionCapabilities(load=True)
        with pytest.raises(AcpSessionListUnsupported) as caught:
            await client.list_sessions()
    assert str(caught.value).startswith("The agent (")
    assert fake_agent.frames_in("session/list") == []


async def test_the_workspaces_sessions_are_listed_across_pages_with_titles(
    fake_agent: FakeAgent, tmp_path: Path
) -> None:
    spec = agent_spec(fake_agent, tmp_path, "--session-list", "--list-page", "1")
    async with open_test_client(spec) as client:
        assert client.session_capabilities == SessionCapabilities(load=True, list=True)
        opened = [await client.open_session() for _ in range(3)]
        for n, session in enumerate(opened):
            async for _ in session.prompt(f"topic {n}"):
                pass
        listed = await client.list_sessions()
    assert {entry.session_id for entry in listed} == {s.session_id for s in opened}
    assert {entry.title for entry in listed} == {"topic 0", "topic 1", "topic 2"}
    workspace = fake_agent.frames_in("session/new")[0]["params"]["cwd"]
    assert all(entry.cwd == workspace and entry.updated for entry in listed)
    assert len(fake_agent.frames_in("session/list")) == 3
