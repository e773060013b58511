"""Switchboard against an agent built on the official Python SDK (tests/fakes/sdk_agent.py, in its
own venv): commands sent before the session/new answer, config options of every shape, modes and
the tool gate, another protocol version, fs/* and terminal/* calls. A missing SDK venv skips, or
fails where CI requires real agents (SWITCHBOARD_REQUIRE_REAL_AGENTS=1)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpClient, AcpProtocolMismatch, GatePlan, RuntimeSpec, get_backend, open_runtime
from config import load_settings
from tests.acp_helpers import collect_turn, prepare_client, texts
from tests.engine_helpers import ScriptedSurface, finished, running_app
from tests.fakes.real_agents import sdk_agent_argv

pytestmark = pytest.mark.anyio
WAIT = 30  # seconds: an upper bound on every test here, never a measurement


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        kept = ("SWITCHBOARD_REQUIRE_REAL_AGENTS", "SWITCHBOARD_AGENT_CACHE")
        if name.startswith("SWITCHBOARD_") and name not in kept:
            monkeypatch.delenv(name)


class SdkAgent:
    """The SDK agent's argv and the calls it logged."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def argv(self, *flags: str) -> list[str]:
        argv = sdk_agent_argv("--log", str(self.log), *flags)
        if argv is None:
            if os.environ.get("SWITCHBOARD_REQUIRE_REAL_AGENTS") == "1":
                pytest.fail(
                    "the Python SDK agent is not installed; run: bash tests/fakes/install_agents.sh"
                )
            pytest.skip("the Python SDK's venv is not installed (tests/fakes/install_agents.sh)")
        return argv

    def calls(self, method: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        records = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [r["params"] for r in records if r["method"] == method]


@pytest.fixture
def sdk(tmp_path: Path) -> SdkAgent:
    return SdkAgent(tmp_path / "sdk-agent-log.jsonl")


def spec(sdk: SdkAgent, workspace: Path, *flags: str) -> RuntimeSpec:
    return RuntimeSpec(
        backend=get_backend("generic"),
        argv=tuple(sdk.argv(*flags)),
        workspace=workspace,
        request_timeout=10.0,
        initialize_timeout=10.0,
        shutdown_grace=0.5,
    )


@asynccontextmanager
async def client_of(
    sdk: SdkAgent, workspace: Path, *flags: str, gate: GatePlan | None = None
) -> AsyncIterator[AcpClient]:
    with anyio.fail_after(WAIT):
        async with open_runtime(spec(sdk, workspace, *flags)) as runtime:
            yield await prepare_client(runtime, gate)


# ---- (1) commands before the first prompt ---------------------------------------------------
async def test_commands_sent_before_the_session_new_answer_are_in_the_session_state(
    sdk: SdkAgent, workspace: Path
) -> None:
    async with client_of(sdk, workspace, "--commands", "review:Review a file,plan:Plan") as client:
        session = await client.open_session()
        assert session.state.command_names == ("review", "plan")
        assert session.state.commands[0].description == "Review a file"
    assert sdk.calls("session/prompt") == []


async def test_help_lists_the_commands_the_sdk_agent_sent_before_any_prompt(
    sdk: SdkAgent, tmp_path: Path, workspace: Path
) -> None:
    argv = sdk.argv("--commands", "review:Review a file,plan:Plan", "--modes")
    settings = load_settings(
        agent="generic",
        agent_command=shlex.join(argv),
        workspace=workspace,
        state=str(tmp_path / "state.db"),
        cancel_grace=1,
        shutdown_grace=0.5,
        request_timeout=10,
        initialize_timeout=10,
        telegram={"allowed_users": ["alice"]},
    )
    surface = ScriptedSurface()
    with anyio.fail_after(WAIT):
        async with running_app(settings, surface):
            await finished(surface.post(surface.message("alice", "hello")))
            await finished(surface.post(surface.message("alice", "/help")))
    shown = surface.transcript()
    assert "sdk: hello" in shown
    assert "The agent also understands: /review, /plan" in shown
    # the gate found the asking mode through the SDK's modes and the agent confirmed it
    assert [c["modeId"] for c in sdk.calls("session/set_mode")] == ["default"]


# ---- (2) config options of every shape ------------------------------------------------------
async def test_the_model_option_with_its_own_id_and_groups_is_listed_and_switched(
    sdk: SdkAgent, workspace: Path
) -> None:
    async with client_of(sdk, workspace, "--config") as client:
        session = await client.open_session()
        assert session.models == ["sonnet", "gpt-x"]
        assert session.model == "sonnet"
        by_id = {option.option_id: option for option in session.state.config_options}
        assert set(by_id) == {"llm", "effort", "thinking"}  # the boolean one too
        assert by_id["thinking"].kind == "boolean"
        await session.set_model("gpt-x")
        assert session.model == "gpt-x"
    (call,) = sdk.calls("session/set_config_option")
    assert call["configId"] == "llm" and call["value"] == "gpt-x"


async def test_slash_model_lists_and_switches_the_sdk_agents_model_option(
    sdk: SdkAgent, tmp_path: Path, workspace: Path
) -> None:
    settings = load_settings(
        agent="generic",
        agent_command=shlex.join(sdk.argv("--config", "--modes")),
        workspace=workspace,
        state=str(tmp_path / "state.db"),
        cancel_grace=1,
        shutdown_grace=0.5,
        request_timeout=10,
        initialize_timeout=10,
        telegram={"allowed_users": ["alice"]},
    )
    surface = ScriptedSurface()
    with anyio.fail_after(WAIT):
        async with running_app(settings, surface):
            await finished(surface.post(surface.message("alice", "/model")))
            await finished(surface.post(surface.message("alice", "/model gpt-x")))
            await finished(surface.post(surface.message("alice", "/model")))
    shown = surface.transcript()
    assert "Models: sonnet (current), gpt-x" in shown
    assert "Model set to gpt-x." in shown
    assert "Models: sonnet, gpt-x (current)" in shown
    assert [(c["configId"], c["value"]) for c in sdk.calls("session/set_config_option")] == [
        ("llm", "gpt-x")
    ]


# ---- (3) modes -------------------------------------------------------------------------------
async def test_the_gate_sets_the_asking_mode_and_the_sdk_agent_confirms_it(
    sdk: SdkAgent, workspace: Path
) -> None:
    async with client_of(sdk, workspace, "--modes", gate=GatePlan(detect=True)) as client:
        session = await client.open_session()
        assert session.gated
        assert session.state.mode == "default"
    assert [c["modeId"] for c in sdk.calls("session/set_mode")] == ["default"]


# ---- (4) another protocol version ------------------------------------------------------------
async def test_an_sdk_agent_answering_another_protocol_version_is_one_sentence(
    sdk: SdkAgent, workspace: Path
) -> None:
    with pytest.raises(AcpProtocolMismatch) as caught:
        async with client_of(sdk, workspace, "--protocol-version", "2"):
            pass
    text = str(caught.value)
    assert text[0].isupper() and text.endswith(".") and "\n" not in text
    assert "speaks ACP protocol version 2" in text
    assert sdk.calls("session/new") == []


# ---- (5) fs and terminal calls ---------------------------------------------------------------
async def test_fs_calls_inside_the_workspace_work_and_outside_are_refused(
    sdk: SdkAgent, tmp_path: Path, workspace: Path
) -> None:
    (workspace / "in.txt").write_text("inside text", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret", encoding="utf-8")
    async with client_of(sdk, workspace) as client:
        session = await client.open_session()
        inside = await collect_turn(session, f"fs {workspace / 'in.txt'} {workspace / 'out.txt'}")
        refused = await collect_turn(session, f"fs {outside} {tmp_path / 'written.txt'}")
    assert "".join(texts(inside)).splitlines() == ["read: inside text", "write: ok"]
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "written by sdk"
    read_line, write_line = "".join(texts(refused)).splitlines()
    assert read_line.startswith("read error: -32000") and "secret" not in read_line
    assert write_line.startswith("write error: -32000")
    assert "outside the workspace" in read_line and "outside the workspace" in write_line
    assert not (tmp_path / "written.txt").exists()


async def test_a_terminal_is_created_waited_for_read_and_released(
    sdk: SdkAgent, workspace: Path
) -> None:
    async with client_of(sdk, workspace) as client:
        session = await client.open_session()
        events = await collect_turn(session, "term")
    assert "".join(texts(events)).strip() == "term: exit=4 output=from-terminal"
