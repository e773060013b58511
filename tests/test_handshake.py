"""The handshake is checked: the protocol version the agent answers with, an agent refusing ours,
and the agent's own `authMethods` in the sign-in sentence. Against the scripted fake agent."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from acp import AcpAuthRequired, AcpClient, AcpProtocolMismatch, GatePlan, open_runtime
from tests.acp_helpers import agent_spec
from tests.conftest import FakeAgent

pytestmark = pytest.mark.anyio
WAIT = 20  # seconds: an upper bound, never a measurement


async def handshake(agent: FakeAgent, workspace: Path, *options: str, dialect: str) -> AcpClient:
    spec = agent_spec(agent, workspace, *options, dialect=dialect)
    with anyio.fail_after(WAIT):
        async with open_runtime(spec) as runtime:
            client = AcpClient(runtime, gate=GatePlan(enforced=False))
            await client.handshake()
            await client.open_session()
            return client


@pytest.mark.parametrize(("dialect", "theirs"), [("generic", 2), ("generic", "1"), ("kiro", 2)])
async def test_an_agent_answering_another_protocol_version_is_one_sentence_naming_both(
    fake_agent: FakeAgent, workspace: Path, dialect: str, theirs: object
) -> None:
    other = json.dumps({"protocolVersion": theirs})
    with pytest.raises(AcpProtocolMismatch) as caught:
        await handshake(fake_agent, workspace, "--init-result", other, dialect=dialect)
    text = str(caught.value)
    assert text.startswith("The agent fake-agent (") and "speaks ACP protocol version" in text
    assert json.dumps(theirs) in text and json.dumps(caught.value.ours) in text
    assert text.endswith(".") and "\n" not in text
    assert not fake_agent.frames_in("session/new")  # nothing more is asked of it


async def test_an_agent_refusing_our_protocol_version_is_named_with_its_own_words(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    refusal = json.dumps({"code": -32602, "message": "Unsupported protocol version: 1"})
    with pytest.raises(AcpProtocolMismatch) as caught:
        await handshake(fake_agent, workspace, "--init-error", refusal, dialect="generic")
    text = str(caught.value)
    assert caught.value.theirs is None
    assert "refused ACP protocol version 1" in text and "Unsupported protocol version" in text
    assert text[0].isupper()


async def test_a_session_refused_for_sign_in_names_the_agents_own_way_to_sign_in(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    methods = {
        "authMethods": [
            {"id": "copilot-login", "name": "Log in", "description": "Run `copilot login`"}
        ],
        "agentInfo": {"name": "copilot", "version": "1.0.102"},
    }
    refused = json.dumps({"code": -32000, "message": "Authentication required"})
    with pytest.raises(AcpAuthRequired) as caught:
        await handshake(
            fake_agent,
            workspace,
            "--init-result",
            json.dumps(methods),
            "--new-error",
            refused,
            dialect="generic",
        )
    text = str(caught.value)
    assert "Run `copilot login`" in text and text.startswith("The agent copilot is not signed in")
