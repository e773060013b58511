"""ACP as agents speak it in late 2026 (issue 22), against the scripted fake agent: session/resume
and session/close when advertised, a resumed session whose answer leaves its modes out keeps its
gate, `$/cancel_request` both ways, terminal sign-in named as a command, the agent named by its
`agentInfo`, a rejected key said as credentials, and every form of protocol version 1."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acp import (
    AcpAuthRequired,
    AcpClient,
    AcpProtocolMismatch,
    AcpRequestTimeout,
    EventKind,
    GatePlan,
    PendingPermission,
    open_runtime,
)
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import CliResult, FakeAgent, script
from tests.test_chat_cli import chat_argv, doctor

pytestmark = pytest.mark.anyio
WAIT = 30  # seconds: an upper bound, never a measurement
ASKING = GatePlan(detect=True)
MODES = ("--modes", "default=Ask first,auto=Run tools automatically", "--current-mode", "auto")


@pytest.fixture
def chat(cli_env: dict[str, str], tmp_path: Path) -> Callable[..., CliResult]:
    """`switchboard chat` on the fake agent with these lines on stdin (then EOF)."""

    def run(
        agent: FakeAgent, lines: Sequence[str], *, agent_opts: Sequence[str], dialect: str = "kiro"
    ) -> CliResult:
        proc = subprocess.run(
            chat_argv(agent, agent_opts=agent_opts, dialect=dialect),
            input="".join(line + "\n" for line in lines),
            capture_output=True,
            text=True,
            timeout=60,
            env=cli_env,
            cwd=tmp_path,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


async def _until(predicate: Any, what: str) -> None:
    """Wait for something the agent logs (bounded by the test's own deadline)."""
    while not predicate():
        await anyio.sleep(0.02)
    assert predicate(), what


# ---- protocol version forms ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dialect", "theirs"),
    [("generic", 1), ("generic", "2025-08-22"), ("kiro", "2025-08-22"), ("kiro", 1)],
)
async def test_every_form_of_protocol_version_1_is_accepted(
    fake_agent: FakeAgent, workspace: Path, dialect: str, theirs: object
) -> None:
    answer = json.dumps({"protocolVersion": theirs})
    spec = agent_spec(fake_agent, workspace, "--init-result", answer, dialect=dialect)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            assert texts(await collect_turn(session, "hi")) == ["Echo: ", "hi"]


@pytest.mark.parametrize("theirs", [2, "2027-01-01", True])
async def test_a_version_we_do_not_speak_is_refused_with_one_sentence(
    fake_agent: FakeAgent, workspace: Path, theirs: object
) -> None:
    answer = json.dumps({"protocolVersion": theirs})
    spec = agent_spec(fake_agent, workspace, "--init-result", answer, dialect="generic")
    with anyio.fail_after(WAIT), pytest.raises(AcpProtocolMismatch) as caught:
        async with open_test_client(spec):
            pass
    text = str(caught.value)
    assert f"speaks ACP protocol version {json.dumps(theirs)}" in text
    assert text[0].isupper() and text.endswith(".") and "\n" not in text


# ---- session/resume and session/close --------------------------------------------------------
async def test_resume_is_used_when_advertised_and_replays_nothing(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, "--session-resume", dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            first = await client.open_session()
            await collect_turn(first, "remember me")
            session_id = first.session_id
        async with open_test_client(spec) as client:
            assert client.session_capabilities.resume and client.can_resume
            resumed = await client.resume_session(session_id)
            assert texts(await collect_turn(resumed, "again")) == ["Echo: ", "again"]
    (frame,) = fake_agent.frames_in("session/resume")
    assert frame["params"]["sessionId"] == session_id
    assert Path(frame["params"]["cwd"]).is_absolute()
    assert not fake_agent.frames_in("session/load")


async def test_load_is_used_when_resume_is_not_advertised(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            first = await client.open_session()
            await client.resume_session(first.session_id)
    assert len(fake_agent.frames_in("session/load")) == 1
    assert not fake_agent.frames_in("session/resume")


async def test_close_is_sent_only_when_advertised(fake_agent: FakeAgent, workspace: Path) -> None:
    with anyio.fail_after(WAIT):
        for options in (("--session-close",), ()):
            spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
            async with open_test_client(spec) as client:
                session = await client.open_session()
                await client.close_session(session.session_id)
                assert session.session_id not in client.sessions
    (frame,) = fake_agent.frames_in("session/close")
    closed = [r for r in fake_agent.records() if r.get("event") == "closed"]
    assert [r["sessionId"] for r in closed] == [frame["params"]["sessionId"]]


def test_new_in_chat_closes_the_session_it_leaves(chat, fake_agent):  # type: ignore[no-untyped-def]
    result = chat(fake_agent, ["hello", "/new", "again"], agent_opts=("--session-close",))
    assert result.returncode == 0, result.stderr
    first, second = (f["params"]["sessionId"] for f in fake_agent.frames_in("session/prompt"))
    assert first != second
    (close,) = fake_agent.frames_in("session/close")
    assert close["params"]["sessionId"] == first


def test_a_restarted_chat_resumes_with_session_resume(chat, fake_agent):  # type: ignore[no-untyped-def]
    opts = ("--session-resume", "--session-close")
    assert chat(fake_agent, ["hello"], agent_opts=opts).returncode == 0
    second = chat(fake_agent, ["again"], agent_opts=opts)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "Echo: again\n"  # resumed: no notice that context was lost
    assert len(fake_agent.frames_in("session/resume")) == 1
    assert not fake_agent.frames_in("session/load")
    assert len(fake_agent.frames_in("session/new")) == 1


# ---- point 6: a resumed session keeps its gate -------------------------------------------------
@pytest.mark.parametrize("resume", [False, True], ids=["load", "resume"])
async def test_a_resume_answering_without_modes_keeps_the_gate_with_the_known_modes(
    fake_agent: FakeAgent, workspace: Path, resume: bool
) -> None:
    options = (*MODES, "--resume-bare", *(("--session-resume",) if resume else ()))
    spec = agent_spec(fake_agent, workspace, *options, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, ASKING) as client:
            first = await client.open_session()
            assert first.gated and first.state.mode == "default"
            first.close()
            resumed = await client.resume_session(first.session_id)
            assert resumed.gated and resumed.state.mode == "default"
            assert texts(await collect_turn(resumed, "still here")) == ["Echo: ", "still here"]
    method = "session/resume" if resume else "session/load"
    assert len(fake_agent.frames_in(method)) == 1
    # the asking mode was set again after the bare answer, and its success accepted
    assert [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")] == [
        "default",
        "default",
    ]


async def test_after_a_restart_the_presets_asking_mode_is_set_on_a_bare_answer(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, *MODES, "--resume-bare", dialect="claude")
    plan = GatePlan(mode="default")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec, plan) as client:
            session_id = (await client.open_session()).session_id
        async with open_test_client(spec, plan) as client:  # nothing known in memory
            resumed = await client.resume_session(session_id)
            assert resumed.gated and resumed.state.mode == "default"


def test_a_restarted_chat_keeps_a_session_whose_load_answers_nothing(chat, fake_agent):  # type: ignore[no-untyped-def]
    opts = ("--modes", "default,acceptEdits", "--resume-bare")
    assert chat(fake_agent, ["hello"], agent_opts=opts, dialect="claude").returncode == 0
    second = chat(fake_agent, ["again"], agent_opts=opts, dialect="claude")
    assert second.returncode == 0, second.stderr
    assert "could not" not in second.stdout and second.stdout.endswith("Echo: again\n")
    assert len(fake_agent.frames_in("session/load")) == 1
    assert len(fake_agent.frames_in("session/new")) == 1  # the session was not thrown away


# ---- $/cancel_request ------------------------------------------------------------------------
async def test_a_request_that_missed_its_budget_is_cancelled_on_the_agent(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(
        fake_agent, workspace, "--hang-requests", "session/new", dialect="generic",
        request_timeout=0.5,
    )  # fmt: skip
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            with pytest.raises(AcpRequestTimeout):
                await client.open_session()
            await _until(lambda: fake_agent.frames_in("$/cancel_request"), "the cancel arrived")
    (new,) = fake_agent.frames_in("session/new")
    (cancel,) = fake_agent.frames_in("$/cancel_request")
    assert cancel["params"] == {"requestId": new["id"]}
    assert "id" not in cancel  # a notification


async def test_a_permission_request_the_agent_withdraws_closes_its_card(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    go = tmp_path / "withdraw-now"
    steps = script(
        {
            "withdraw": {
                "method": "session/request_permission",
                "params": {
                    "toolCall": {"toolCallId": "t1", "title": "Run ls", "kind": "execute"},
                    "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}],
                },
            },
            "when_file": str(go),
        }
    )
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    seen: list[PendingPermission] = []

    async def never_answered(pending: PendingPermission) -> str | None:
        seen.append(pending)
        go.write_text("now")
        await pending.wait()  # ends only because the agent withdrew it
        return pending.answer_id

    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events = await collect_turn(session, steps, never_answered)
    (pending,) = seen
    assert pending.withdrawn and pending.answer_id is None
    said = [t for t in texts(events) if t.startswith("withdrawn:")]
    assert said == ['withdrawn:{"error":{"code":-32800,"message":"Request cancelled"}}']
    assert events[-1].kind is EventKind.TERMINAL


def _allow(pending: PendingPermission) -> str | None:
    return next((o.option_id for o in pending.request.options if o.kind == "allow_once"), None)


async def test_a_running_client_method_the_agent_withdraws_is_answered_cancelled(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    create = {"command": "/bin/sh", "args": ["-c", "sleep 30"]}
    steps = script(
        {"permission": {}},  # the approval the terminal belongs to
        {"request": {"method": "terminal/create", "params": create}, "save": "t1"},
        {
            "withdraw": {
                "method": "terminal/wait_for_exit",
                "params": {"terminalId": "$t1.terminalId"},
            }
        },
    )
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events = await collect_turn(session, steps, _allow)
    said = [t for t in texts(events) if t.startswith("withdrawn:")]
    # still waiting for a 30 s command when withdrawn: the wait stopped and said so
    assert said == ['withdrawn:{"error":{"code":-32800,"message":"Request cancelled"}}']


# ---- sign-in ---------------------------------------------------------------------------------
TERMINAL_AUTH = {
    "type": "terminal",
    "id": "tui-login",
    "name": "Log in in a terminal",
    "args": ["--login", "--device"],
    "env": {"LOGIN_FLOW": "device code"},
}
AUTH_REQUIRED = {"code": -32000, "message": "Authentication required"}


async def test_a_terminal_sign_in_is_named_as_the_exact_command_and_the_agent_by_its_info(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    info = {"agentInfo": {"name": "tui-agent", "title": "TUI Agent", "version": "2.0"}}
    spec = agent_spec(
        fake_agent,
        workspace,
        *("--terminal-auth", json.dumps(TERMINAL_AUTH), "--init-result", json.dumps(info)),
        *("--new-error", json.dumps(AUTH_REQUIRED)),
        dialect="generic",
    )
    with anyio.fail_after(WAIT), pytest.raises(AcpAuthRequired) as caught:
        async with open_test_client(spec) as client:
            await client.open_session()
    text = str(caught.value)
    argv = shlex.join(spec.argv)
    assert text.startswith("The agent TUI Agent is not signed in")
    assert f"run `LOGIN_FLOW='device code' {argv} --login --device` where the agent runs" in text
    (init,) = fake_agent.frames_in("initialize")
    assert init["params"]["clientCapabilities"]["auth"] == {"terminal": True}


async def test_the_agents_own_instruction_is_carried_bounded(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    refused = {
        "code": -32000,
        "message": "Authentication required. Please run `qwen auth` in a terminal first "
        "(key sk-ant-api03-Xq7vB2mN9kLp4RtY8wZc1Df6Gh3Jk5Ls0Qe was refused). "
        + "Then try again. "
        * 40,
    }
    spec = agent_spec(fake_agent, workspace, "--new-error", json.dumps(refused), dialect="generic")
    with anyio.fail_after(WAIT), pytest.raises(AcpAuthRequired) as caught:
        async with open_test_client(spec) as client:
            await client.open_session()
    text = str(caught.value)
    assert "Please run `qwen auth` in a terminal first" in caught.value.said
    assert "Xq7vB2mN9kLp4RtY8wZc1Df6Gh3Jk5Ls0Qe" not in text
    assert len(caught.value.said) <= 200 and caught.value.said.endswith("…")
    assert text.startswith("The agent fake-agent is not signed in")


@pytest.mark.parametrize(
    "said",
    ["401 Unauthorized", "invalid x-api-key", "Request failed with status code 401"],
)
async def test_a_rejected_key_is_a_credentials_sentence(
    fake_agent: FakeAgent, workspace: Path, said: str
) -> None:
    steps = script({"error": {"code": -32603, "message": "Internal error", "data": said}})
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            with pytest.raises(AcpAuthRequired) as caught:
                await collect_turn(session, steps)
    assert caught.value.rejected and not caught.value.transient
    text = str(caught.value)
    assert "rejected its credentials" in text and "Check the API key it uses" in text
    assert text[0].isupper() and "\n" not in text


def test_doctor_names_the_terminal_sign_in_command(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    command = fake_agent.command(
        "--terminal-auth", json.dumps(TERMINAL_AUTH), "--new-error", json.dumps(AUTH_REQUIRED)
    )
    result = doctor(run_cli, command)
    assert result.returncode == 1
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "signed in" in failed and "--login --device` where the agent runs" in failed
    assert "LOGIN_FLOW='device code'" in failed


async def test_a_client_sees_the_agents_name_for_its_sentences(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_runtime(spec) as runtime:
            client = AcpClient(runtime, gate=GatePlan(enforced=False))
            await client.handshake()
            assert client.agent_name == "fake-agent"


async def test_a_session_resumed_while_its_close_is_on_its_way_is_closed_first(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(
        fake_agent, workspace, "--session-resume", "--session-close", dialect="generic"
    )
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session_id = (await client.open_session()).session_id
            send_close = client.start_closing(session_id)  # as an idle release does
            assert session_id not in client.sessions and session_id not in client.released
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.resume_session, session_id)
                await anyio.lowlevel.checkpoint()  # the resume is waiting for the close
                assert not fake_agent.frames_in("session/resume")
                await send_close()
            assert session_id in client.sessions
    methods = [f.get("method") for f in fake_agent.frames_in() if "method" in f]
    assert methods.index("session/close") < methods.index("session/resume")


def test_after_a_restart_an_agent_gated_by_its_detected_modes_keeps_a_bare_loaded_session(  # type: ignore[no-untyped-def]
    chat, fake_agent
):
    """Nothing names the asking mode (generic agent, no SWITCHBOARD_AGENT_MODE) and the restart
    forgot what the first session offered: a new session of the agent says what its modes are
    (closed again where the agent can close sessions), and the loaded one is kept and gated."""
    opts = ("--modes", "default,acceptEdits", "--resume-bare", "--session-close")
    assert chat(fake_agent, ["hello"], agent_opts=opts, dialect="generic").returncode == 0
    second = chat(fake_agent, ["again"], agent_opts=opts, dialect="generic")
    assert second.returncode == 0, second.stderr
    assert "could not" not in second.stdout and second.stdout.endswith("Echo: again\n")
    assert len(fake_agent.frames_in("session/load")) == 1, second.stdout
    outs = [r["frame"] for r in fake_agent.records() if r.get("dir") == "out" and "frame" in r]
    (first, probe) = [f for f in outs if "sessionId" in (f.get("result") or {})]
    closed = [f["params"]["sessionId"] for f in fake_agent.frames_in("session/close")]
    assert probe["result"]["sessionId"] in closed  # the new session only told us its modes
    assert first["result"]["sessionId"] not in closed
    modes = [f["params"]["modeId"] for f in fake_agent.frames_in("session/set_mode")]
    assert modes and set(modes) == {"default"}  # the loaded session was put in it again
