"""fs/* and terminal/* served to a real agent subprocess (the scripted fake agent), confined to the
workspace; and -32601 for methods we did not advertise."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import AcpEvent, AcpSession, EventKind
from acp.terminals import MAX_TERMINALS_PER_SESSION
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, pid_alive, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for

WAIT = 30  # seconds: an upper bound on every test here, never a measurement


def _request(method: str, save: str | None = None, **params: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"request": {"method": method, "params": params}}
    if save is not None:
        step["save"] = save
    return step


async def _replies(
    session: AcpSession, *steps: dict[str, Any], events: list[AcpEvent] | None = None
) -> list[dict[str, Any]]:
    """The answers the agent got to its requests, in order (the turn's events into `events`)."""
    got = await collect_turn(session, script(*steps))
    if events is not None:
        events.extend(got)
    return [json.loads(t[len("reply:") :]) for t in texts(got) if t.startswith("reply:")]


def _error(reply: dict[str, Any]) -> str:
    assert "error" in reply, reply
    message = reply["error"]["message"]
    assert isinstance(message, str)
    return message


# ---- the handshake ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_initialize_advertises_fs_and_terminal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)):
            pass
    (frame,) = fake_agent.frames_in("initialize")
    assert frame["params"]["clientCapabilities"] == {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
        "auth": {"terminal": True},
        "elicitation": {"form": {}, "url": {}},
        "plan": {},
        "subagents": {},
        "session": {"compaction": {}, "notices": {}},
    }


@pytest.mark.anyio
async def test_a_method_we_did_not_advertise_gets_minus_32601_and_one_debug_line(
    fake_agent: FakeAgent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="acp.client_methods")
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            (reply,) = await _replies(session, _request("session/ask_user", message="hi"))
    assert reply["error"]["code"] == -32601
    lines = [r.getMessage() for r in caplog.records if r.name == "acp.client_methods"]
    assert len([line for line in lines if "session/ask_user" in line]) == 1


# ---- fs/read_text_file -----------------------------------------------------------------------
@pytest.mark.anyio
async def test_read_returns_the_file_and_honours_line_and_limit(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    path = str(workspace / "notes.txt")
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            whole, part = await _replies(
                session,
                _request("fs/read_text_file", path=path),
                _request("fs/read_text_file", path=path, line=2, limit=2),
            )
    assert whole == {"result": {"content": "one\ntwo\nthree\nfour\n"}}
    assert part == {"result": {"content": "two\nthree\n"}}


@pytest.mark.anyio
async def test_read_refuses_what_lies_outside_or_is_no_text_file(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret-dir" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret", encoding="utf-8")
    (workspace / "escape").symlink_to(secret)
    (workspace / "sub").mkdir()
    os.mkfifo(workspace / "pipe")
    (workspace / "binary.bin").write_bytes(b"\xff\xfe\x00 not text")
    with (workspace / "huge.txt").open("w") as big:
        big.write(("x" * 1023 + "\n") * (5 * 1024))  # 5 MiB
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            replies = await _replies(
                session,
                _request("fs/read_text_file", path=str(secret)),
                _request("fs/read_text_file", path=f"{workspace}/../secret-dir/secret.txt"),
                _request("fs/read_text_file", path=str(workspace / "escape")),
                _request("fs/read_text_file", path="notes.txt"),
                _request("fs/read_text_file", path=str(workspace / "sub")),
                _request("fs/read_text_file", path=str(workspace / "pipe")),
                _request("fs/read_text_file", path="/dev/zero"),
                _request("fs/read_text_file", path=str(workspace / "binary.bin")),
                _request("fs/read_text_file", path=str(workspace / "missing.txt")),
                _request("fs/read_text_file", path=str(workspace / "huge.txt")),
            )
    *refused, cut = replies
    messages = [_error(reply) for reply in refused]
    outside, dotdot, symlink, relative, directory, fifo, device, binary, missing = messages
    assert "outside the workspace" in outside
    assert "outside the workspace" in dotdot
    assert "outside the workspace" in symlink
    assert "secret-dir" not in symlink  # where the symlink led is not told
    assert "not absolute" in relative
    assert "is a directory" in directory
    assert "not a regular file" in fifo
    assert "outside the workspace" in device
    assert "not UTF-8 text" in binary
    assert "does not exist" in missing and replies[8]["error"]["code"] == -32002
    # a file past the reply's cap is cut at its last whole line, and the reply says so
    content = cut["result"]["content"]
    assert content.endswith(
        "[Switchboard cut this reply at 1 MiB: the file goes on at line 1025; "
        "read on with line=1025 and a limit]"
    )
    assert content.count("x" * 1023 + "\n") == 1024
    assert all("Traceback" not in m for m in messages)


@pytest.mark.anyio
async def test_a_request_for_a_session_this_client_does_not_hold_is_refused(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a", encoding="utf-8")
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            (reply,) = await _replies(
                session,
                _request(
                    "fs/read_text_file", sessionId="sess-other", path=str(workspace / "a.txt")
                ),
            )
    assert reply["error"]["code"] == -32602
    assert "no session" in reply["error"]["message"]


def _temp_files(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.name.endswith(".tmp")]


# ---- fs/write_text_file ----------------------------------------------------------------------
@pytest.mark.anyio
async def test_write_creates_parents_replaces_atomically_and_keeps_the_mode(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    existing = workspace / "run.sh"
    existing.write_text("old", encoding="utf-8")
    existing.chmod(0o755)
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            created, replaced = await _replies(
                session,
                _request("fs/write_text_file", path=str(workspace / "a/b/new.txt"), content="hé\n"),
                _request("fs/write_text_file", path=str(existing), content="new"),
            )
    assert created == {"result": None} and replaced == {"result": None}
    assert (workspace / "a/b/new.txt").read_text(encoding="utf-8") == "hé\n"
    assert existing.read_text(encoding="utf-8") == "new"
    assert existing.stat().st_mode & 0o777 == 0o755
    assert _temp_files(workspace) == []


@pytest.mark.anyio
async def test_write_refuses_escapes_and_special_files(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "door").symlink_to(outside, target_is_directory=True)
    os.mkfifo(workspace / "pipe")
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            replies = await _replies(
                session,
                _request("fs/write_text_file", path=str(outside / "x.txt"), content="x"),
                _request("fs/write_text_file", path=str(workspace / "door/x.txt"), content="x"),
                _request("fs/write_text_file", path=str(workspace / "pipe"), content="x"),
                _request("fs/write_text_file", path=str(workspace), content="x"),
                _request("fs/write_text_file", path=str(workspace / "y.txt"), content=3),
            )
    through_path, through_link, fifo, root, not_text = [_error(r) for r in replies]
    assert "outside the workspace" in through_path
    assert "outside the workspace" in through_link
    assert "not a regular file" in fifo
    assert "is a directory" in root
    assert "content must be a string" in not_text
    assert list(outside.iterdir()) == []
    assert not (workspace / "y.txt").exists()


@pytest.mark.anyio
async def test_a_write_between_turns_is_refused(fake_agent: FakeAgent, workspace: Path) -> None:
    target = workspace / "late.txt"
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            await collect_turn(
                session,
                script(
                    {"stop": "end_turn"},
                    _request("fs/write_text_file", path=str(target), content="late"),
                ),
            )
            while not [f for f in fake_agent.frames_in() if "method" not in f and "id" in f]:
                await anyio.sleep(0.02)
    (answer,) = [f for f in fake_agent.frames_in() if "method" not in f and "id" in f]
    assert "not running a prompt turn" in answer["error"]["message"]
    assert not target.exists()


# ---- terminal/* ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_terminal_runs_in_the_workspace_and_reports_output_and_exit(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    events: list[AcpEvent] = []
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            created, waited, output, released, after = await _replies(
                session,
                _request(
                    "terminal/create",
                    save="t1",
                    command="sh",
                    args=["-c", 'pwd; echo "$GREETING"; exit 3'],
                    env=[{"name": "GREETING", "value": "hello there"}],
                ),
                _request("terminal/wait_for_exit", terminalId="$t1.terminalId"),
                _request("terminal/output", terminalId="$t1.terminalId"),
                _request("terminal/release", terminalId="$t1.terminalId"),
                _request("terminal/output", terminalId="$t1.terminalId"),
                events=events,
            )
    activity = [e.terminal for e in events if e.kind is EventKind.TERMINAL_ACTIVITY]
    assert all(a is not None for a in activity)
    assert isinstance(created["result"]["terminalId"], str)
    assert waited == {"result": {"exitCode": 3, "signal": None}}
    assert output["result"] == {
        "output": f"{workspace}\nhello there\n",
        "truncated": False,
        "exitStatus": {"exitCode": 3, "signal": None},
    }
    assert released == {"result": None}
    assert "no terminal" in _error(after)
    first, last = activity[0], activity[-1]
    assert first is not None and first.status_line().startswith("running: sh -c")
    assert not first.exited
    assert last is not None and last.exited and last.last_line == "hello there"


@pytest.mark.anyio
async def test_a_command_line_without_args_runs_through_the_shell(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            _, waited, output = await _replies(
                session,
                _request("terminal/create", save="t", command="echo one && echo two"),
                _request("terminal/wait_for_exit", terminalId="$t.terminalId"),
                _request("terminal/output", terminalId="$t.terminalId"),
            )
    assert waited["result"] == {"exitCode": 0, "signal": None}
    assert output["result"]["output"] == "one\ntwo\n"


@pytest.mark.anyio
async def test_output_keeps_the_tail_cut_at_a_character_boundary(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            _, _, output = await _replies(
                session,
                _request(
                    "terminal/create",
                    save="t",
                    command="printf",
                    args=["a" + "é" * 100],
                    outputByteLimit=51,
                ),
                _request("terminal/wait_for_exit", terminalId="$t.terminalId"),
                _request("terminal/output", terminalId="$t.terminalId"),
            )
    # 51 bytes would start inside an "é" (2 bytes): the half character is dropped too.
    assert output["result"]["output"] == "é" * 25
    assert output["result"]["truncated"] is True


@pytest.mark.anyio
async def test_kill_stops_the_command_and_its_exit_names_the_signal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            _, running, killed, waited = await _replies(
                session,
                _request("terminal/create", save="t", command="sleep", args=["60"]),
                _request("terminal/output", terminalId="$t.terminalId"),
                _request("terminal/kill", terminalId="$t.terminalId"),
                _request("terminal/wait_for_exit", terminalId="$t.terminalId"),
            )
    assert running["result"]["exitStatus"] is None
    assert killed == {"result": None}
    assert waited["result"] == {"exitCode": None, "signal": "SIGKILL"}


@pytest.mark.anyio
async def test_a_terminal_belongs_to_the_session_that_created_it(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            first = await client.open_session()
            second = await client.open_session()
            await _replies(first, _request("terminal/create", save="t", command="true"))
            (stolen,) = await _replies(
                second, _request("terminal/output", terminalId="$t.terminalId")
            )
            (own,) = await _replies(first, _request("terminal/output", terminalId="$t.terminalId"))
    assert "no terminal" in _error(stolen)
    assert "result" in own


@pytest.mark.anyio
async def test_terminal_cwd_and_commands_are_checked_and_the_count_is_capped(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    many = [_request("terminal/create", command="sleep", args=["60"])] * (
        MAX_TERMINALS_PER_SESSION + 1
    )
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            replies = await _replies(
                session,
                _request("terminal/create", command="true", cwd=str(tmp_path)),
                _request("terminal/create", command="no-such-command-here"),
                *many,
            )
    outside, missing, *created = replies
    assert "outside the workspace" in _error(outside)
    assert "was not found" in _error(missing)
    assert all("result" in r for r in created[:-1])
    assert "release one first" in _error(created[-1])


async def _sleeper_pid(session: AcpSession, workspace: Path) -> int:
    pid_file = workspace / "sleeper.pid"
    await _replies(
        session,
        _request(
            "terminal/create",
            command=f"echo $$ > {pid_file}.new; mv {pid_file}.new {pid_file}; exec sleep 60",
        ),
    )
    while not pid_file.exists():
        await anyio.sleep(0.02)
    return int(pid_file.read_text())


@pytest.mark.anyio
async def test_closing_the_session_kills_its_terminals(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            pid = await _sleeper_pid(session, workspace)
            assert pid_alive(pid)
            session.close()
            while pid_alive(pid):
                await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_no_terminal_outlives_the_agent(fake_agent: FakeAgent, workspace: Path) -> None:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            pid = await _sleeper_pid(session, workspace)
            assert pid_alive(pid)
        while pid_alive(pid):
            await anyio.sleep(0.02)


# ---- the live reply's status line ------------------------------------------------------------
@pytest.mark.anyio
async def test_the_live_reply_shows_the_running_command_and_its_last_output_line(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    go = tmp_path / "go"
    command = f"echo compiling; while [ ! -e {go} ]; do sleep 0.05; done; echo linked"
    steps = script(
        {"chunk": "Building."},
        _request("terminal/create", save="b", command=command),
        _request("terminal/wait_for_exit", terminalId="$b.terminalId"),
        {"chunk": " Built."},
    )
    surface = ScriptedSurface()
    # the gate off: this is about the status line (tests/test_gate_client_requests.py: the gate)
    settings = engine_settings(tmp_path, fake_agent, allow_ungated_tools=True)
    async with running_app(settings, surface):
        done = surface.post(surface.message("alice", steps))
        await wait_for(
            lambda: any(
                "running: echo compiling" in call.text and "compiling" in call.text.split("—")[-1]
                for call in surface.calls
            ),
            "the status line with the command and its output",
        )
        go.touch()
        await finished(done)
    assert "running:" not in surface.transcript()
    assert "Built." in surface.transcript()
