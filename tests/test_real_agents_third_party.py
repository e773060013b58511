"""Contract tests against two more REAL agents from npm, driven as `--agent generic`:
gemini-cli 0.61.0 (`gemini.js --acp`, Gemini API mock) and opencode 1.18.33 (`opencode acp`,
OpenAI Chat Completions mock), offline against the loopback mock model.

`bash tests/fakes/install_agents.sh` installs them; CI sets SWITCHBOARD_REQUIRE_REAL_AGENTS=1 so a
missing install fails instead of skipping. What each agent was seen to do:
tests/fakes/REAL_AGENTS_NOTES.md."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from acp import (
    AcpAuthRequired,
    AcpClient,
    EventKind,
    GatePlan,
    PendingPermission,
    RuntimeSpec,
    get_backend,
    open_runtime,
)
from tests.acp_helpers import collect_turn
from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_TEXT,
    MOCK_TOOL_DONE_TEXT,
    MOCK_TOOL_MARKER,
    MOCK_TOOL_OUTPUT_FILE,
    MockModelServer,
)
from tests.fakes.real_agents import argv_or_skip

pytestmark = pytest.mark.anyio

AGENTS = ("gemini", "opencode")
TURN = 60.0  # seconds one agent start plus one turn may take on a loaded 2-core runner
#: The model each agent is switched to by `/model` (both advertise it in session/new).
OTHER_MODEL = {"gemini": "gemini-2.5-pro", "opencode": "mock/mock-model-2"}


def _env(agent: str, home: Path, mock: MockModelServer) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    if agent == "gemini":
        return real_agents.gemini_env_mock(home, mock.url)
    return real_agents.opencode_env_mock(home, mock.url)


def _spec(agent: str, tmp_path: Path, mock: MockModelServer) -> RuntimeSpec:
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    return RuntimeSpec(
        backend=get_backend("generic"),
        argv=tuple(argv_or_skip(agent)),
        workspace=workspace.resolve(),
        env=_env(agent, tmp_path / "home", mock),
        request_timeout=TURN,
        initialize_timeout=TURN,
        shutdown_grace=5.0,
    )


@asynccontextmanager
async def _client(spec: RuntimeSpec) -> AsyncIterator[AcpClient]:
    # gate: not enforced until the mode-based gate lands (gemini `default` asks; opencode asks
    # per its `permission` config); then build the GatePlan from the session's modes.
    async with open_runtime(spec) as runtime:
        client = AcpClient(runtime, gate=GatePlan(enforced=False), cancel_grace=5.0)
        await client.handshake()
        yield client


def _text(events: list) -> str:  # type: ignore[type-arg]
    return "".join(e.text for e in events if e.kind is EventKind.TEXT)


def _answer(kind: str, seen: list[PendingPermission]):  # type: ignore[no-untyped-def]
    def answer(pending: PendingPermission) -> str:
        seen.append(pending)
        option = pending.request.option_of_kind(kind)
        assert option is not None, pending.request.options
        return option.option_id

    return answer


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_turn_streams_the_models_text(agent, tmp_path, mock_model):
    spec = _spec(agent, tmp_path, mock_model)
    with anyio.fail_after(TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            events = await collect_turn(session, "SCN_TEXT say hello")
    assert MOCK_TEXT in _text(events)
    assert len([e for e in events if e.kind is EventKind.TEXT]) >= 2  # streamed, not one block


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize(("kind", "runs"), [("allow_once", True), ("reject_once", False)])
async def test_a_tool_call_goes_through_the_approval(agent, kind, runs, tmp_path, mock_model):
    spec = _spec(agent, tmp_path, mock_model)
    seen: list[PendingPermission] = []
    with anyio.fail_after(TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            events = await collect_turn(session, "SCN_TOOL run it", _answer(kind, seen))
    assert len(seen) == 1
    tool = seen[0].request.tool
    # the approval carries the command (from the request or the earlier tool_call update)
    assert MOCK_TOOL_MARKER in tool.describe(), tool
    marker = spec.workspace / MOCK_TOOL_OUTPUT_FILE
    assert marker.exists() is runs
    if runs:
        assert marker.read_text().strip() == MOCK_TOOL_MARKER
        assert MOCK_TOOL_DONE_TEXT in _text(events)


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_bad_key_ends_in_the_sign_in_sentence(agent, tmp_path, mock_model):
    spec = _spec(agent, tmp_path, mock_model)
    with anyio.fail_after(TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            with pytest.raises(AcpAuthRequired) as caught:
                await collect_turn(session, "SCN_E401 hello")
    sentence = str(caught.value)
    assert sentence[:1].isupper()
    assert "sign" in sentence.lower()
    assert "Traceback" not in sentence


@pytest.mark.parametrize("agent", AGENTS)
async def test_model_switches_and_the_next_turn_uses_it(agent, tmp_path, mock_model):
    spec = _spec(agent, tmp_path, mock_model)
    with anyio.fail_after(TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            assert OTHER_MODEL[agent] in session.models
            await session.set_model(OTHER_MODEL[agent])
            mock_model.clear()
            events = await collect_turn(session, "SCN_TEXT after the switch")
    assert MOCK_TEXT in _text(events)
    want = OTHER_MODEL[agent].split("/")[-1]
    assert [r.model for r in mock_model.filtered(scenario="SCN_TEXT")] == [want]


async def test_gemini_cannot_load_its_session_on_a_new_process_and_a_fresh_one_works(
    tmp_path, mock_model
):
    # gemini-cli 0.61.0 answers session/load on a new process with -32603 "No previous sessions
    # found for this project." (interop.md §2.5 saw "Invalid session identifier"). What the user
    # sees in a chat (one notice, then a fresh session) is the bot's resume path; here the ACP
    # side: the failure is one AcpError sentence and the same process opens a working session.
    from acp import AcpError

    spec = _spec("gemini", tmp_path, mock_model)
    with anyio.fail_after(2 * TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            await collect_turn(session, "SCN_TEXT remember this")
            session_id = session.session_id
        async with _client(spec) as client:
            with pytest.raises(AcpError) as caught:
                await client.load_session(session_id)
            fresh = await client.open_session()
            events = await collect_turn(fresh, "SCN_TEXT and now")
    sentence = str(caught.value)
    assert "Traceback" not in sentence and "\n" not in sentence
    assert fresh.session_id != session_id
    assert MOCK_TEXT in _text(events)


async def test_an_opencode_session_resumes_on_a_new_process(tmp_path, mock_model):
    agent = "opencode"
    spec = _spec(agent, tmp_path, mock_model)
    with anyio.fail_after(2 * TURN):
        async with _client(spec) as client:
            session = await client.open_session()
            await collect_turn(session, "SCN_TEXT remember this")
            session_id = session.session_id
        async with _client(spec) as client:
            resumed = await client.load_session(session_id)
            mock_model.clear()
            events = await collect_turn(resumed, "SCN_TEXT and now")
    assert MOCK_TEXT in _text(events)
    # the agent sent the earlier turn back to the model: the history survived the restart
    (last,) = mock_model.filtered(scenario="SCN_TEXT")
    assert "remember this" in str(last.body)


@pytest.mark.parametrize("agent", AGENTS)
def test_switchboard_ask_answers_with_the_generic_preset(agent, run_cli, tmp_path, mock_model):
    argv = argv_or_skip(agent)
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = _env(agent, tmp_path / "home", mock_model)
    env = {k: v for k, v in env.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_ALLOW_UNGATED_TOOLS"] = "1"  # gate: switch to the mode-based gate
    result = run_cli(
        "ask",
        "--agent",
        "generic",
        "--agent-command",
        shlex.join(argv),
        "--cwd",
        str(workspace),
        "--timeout",
        "60",
        "SCN_TEXT say hello",
        env=env,
        timeout=TURN + 30,
    )
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
