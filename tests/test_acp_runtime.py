"""Agent processes (acp/runtime.py) against the fake agent: spawning, process groups, the shutdown
ladder, stderr draining, the environment an agent gets, workspace binding, the pool, and
session/load."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from acp import (
    AcpClient,
    AcpError,
    AcpRequestTimeout,
    AcpSpawnFailed,
    AcpWorkspaceBindingError,
    RuntimeSpec,
    get_backend,
    open_runtime,
)
from acp.agent_env import agent_environment
from acp.runtime import STDERR_TAIL_BYTES
from acp.runtime_pool import RuntimePool
from tests.acp_helpers import agent_spec as _spec
from tests.acp_helpers import collect_turn as _turn
from tests.acp_helpers import open_test_client as _client
from tests.acp_helpers import prepare_client as _prepare
from tests.acp_helpers import texts
from tests.conftest import FakeAgent, pid_alive

WAIT = 20  # seconds: an upper bound on every test here, never a measurement


async def until(condition: Callable[[], bool]) -> None:
    """Poll a condition; the caller's fail_after bounds it."""
    while not condition():
        await anyio.sleep(0.02)


# ---- spawning -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_command_missing_from_path_fails_before_spawning_and_is_named(
    workspace: Path,
) -> None:
    spec = RuntimeSpec(
        backend=get_backend("kiro"),
        argv=("no-such-agent-binary-4821", "acp"),
        workspace=workspace,
        env={"PATH": str(workspace)},
    )
    with anyio.fail_after(WAIT), pytest.raises(AcpSpawnFailed) as caught:
        async with open_runtime(spec):
            pytest.fail("the runtime must not start")
    assert caught.value.command == "no-such-agent-binary-4821"
    assert "no-such-agent-binary-4821" in str(caught.value)
    assert "not found on PATH" in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param("plain-file", "is not executable", id="not-executable"),
        pytest.param("nothing", "was not found", id="missing-path"),
        pytest.param("directory", "was not found", id="directory"),
    ],
)
async def test_an_agent_path_that_cannot_be_executed_is_refused_with_its_path(
    workspace: Path, tmp_path: Path, make: str, reason: str
) -> None:
    target = tmp_path / "bin" / "agent"
    target.parent.mkdir()
    if make == "plain-file":
        target.write_text("#!/bin/sh\nexit 0\n")
        target.chmod(stat.S_IRUSR | stat.S_IWUSR)
    elif make == "directory":
        target.mkdir()
    spec = RuntimeSpec(backend=get_backend("kiro"), argv=(str(target),), workspace=workspace)
    with anyio.fail_after(WAIT), pytest.raises(AcpSpawnFailed) as caught:
        async with open_runtime(spec):
            pytest.fail("the runtime must not start")
    assert caught.value.command == str(target)
    assert caught.value.reason == reason
    assert str(target) in str(caught.value)


@pytest.mark.anyio
async def test_an_empty_command_is_a_spawn_failure_not_a_crash(workspace: Path) -> None:
    spec = RuntimeSpec(backend=get_backend("generic"), argv=(), workspace=workspace)
    with anyio.fail_after(WAIT), pytest.raises(AcpSpawnFailed, match="no agent command"):
        async with open_runtime(spec):
            pytest.fail("the runtime must not start")


# ---- process group and shutdown ------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_agent_runs_in_its_own_process_group_and_its_forked_child_dies_with_it(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, "--fork-child")) as client:
            pid = client.runtime.pid
            assert os.getpgid(pid) == pid
            assert os.getpgid(pid) != os.getpgrp()
            (child,) = [r["pid"] for r in fake_agent.records() if r.get("event") == "child"]
            assert os.getpgid(child) == pid
            assert pid_alive(child)
    assert not pid_alive(pid)
    assert not pid_alive(child)


@pytest.mark.anyio
async def test_an_agent_ignoring_stdin_eof_is_sigtermed(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, "--ignore-stdin-eof")) as client:
            runtime = client.runtime
    assert runtime.process.returncode == -signal.SIGTERM
    events = [r.get("event") for r in fake_agent.records() if "event" in r]
    assert "stdin_eof" in events
    exits = [(r["code"], r["reason"]) for r in fake_agent.records() if r.get("event") == "exit"]
    assert exits == [(-15, "signal")]


@pytest.mark.anyio
async def test_an_agent_ignoring_stdin_eof_and_sigterm_is_sigkilled(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = _spec(fake_agent, workspace, "--ignore-stdin-eof", "--ignore-sigterm", "--fork-child")
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            runtime = client.runtime
            (child,) = [r["pid"] for r in fake_agent.records() if r.get("event") == "child"]
    assert runtime.process.returncode == -signal.SIGKILL
    events = [r.get("event") for r in fake_agent.records() if "event" in r]
    assert "stdin_eof" in events and "signal_ignored" in events
    assert not pid_alive(runtime.pid) and not pid_alive(child)


# ---- stderr -------------------------------------------------------------------------------------
def _last_flood_line(total: int) -> str:
    """The last numbered line the fake agent's --stderr-flood writes for `total` bytes."""
    size = n = 0
    last = ""
    while True:
        line = f"fake-agent stderr flood line {n:08d} {'.' * 60}\n"
        if size + len(line) > total:
            return last
        last = line.rstrip("\n")
        size += len(line)
        n += 1


@pytest.mark.anyio
async def test_stderr_is_drained_while_the_handshake_runs_and_only_a_bounded_tail_is_kept(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    total = 2_000_000
    last = _last_flood_line(total)
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, "--stderr-flood", str(total))) as client:
            tail = client.runtime.stderr
            await until(lambda: last in tail.text())
            everything = tail.text(max_lines=1_000_000)
    assert len(everything.encode()) <= STDERR_TAIL_BYTES
    assert "flood line 00000000 " not in everything
    assert len(tail.text().splitlines()) <= 20


def test_agent_environment_is_an_allowlist_and_never_passes_switchboard_settings() -> None:
    base = {
        "SWITCHBOARD_TELEGRAM__TOKEN": "123456:abc",
        "SWITCHBOARD_STATE": "redis://:hunter2@localhost/0",
        "SWITCHBOARD_WORKSPACE": "/work",
        "ANTHROPIC_API_KEY": "the agent's own key",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/",
        "OPENAI_API_KEY": "another preset's key",
        "GITHUB_TOKEN": "listed by the operator",
        "MY_TOOL_MODE": "listed by prefix",
        "REDIS_PASSWORD": "nobody listed it",
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm",
    }
    listed = ["GITHUB_TOKEN", "MY_TOOL_*", "SWITCHBOARD_TELEGRAM__TOKEN", "SWITCHBOARD_*", "*"]
    env = agent_environment(base, preset="claude", listed=listed, home=Path("/agent-home"))
    assert env == {
        "ANTHROPIC_API_KEY": "the agent's own key",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/",
        "GITHUB_TOKEN": "listed by the operator",
        "MY_TOOL_MODE": "listed by prefix",
        "PATH": "/usr/bin",
        "HOME": "/agent-home",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm",
    }
    codex = agent_environment(base, preset="codex")
    assert codex["OPENAI_API_KEY"] == "another preset's key" and "ANTHROPIC_API_KEY" not in codex
    assert codex["HOME"] == "/root"  # no agent home planned: Switchboard's own (sandbox off)


def test_a_runtime_spec_takes_the_allowlisted_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SWITCHBOARD_DISCORD__TOKEN", "MTIz.secret")
    monkeypatch.setenv("SOME_UNLISTED_SECRET", "no")
    monkeypatch.setenv("LANG", "C.UTF-8")
    spec = RuntimeSpec(backend=get_backend("kiro"), argv=("x",), workspace=tmp_path)
    assert not [name for name in spec.env if name.startswith("SWITCHBOARD_")]
    assert "SOME_UNLISTED_SECRET" not in spec.env
    assert spec.env["LANG"] == "C.UTF-8" and spec.env["PATH"] == os.environ["PATH"]


# ---- workspace binding ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_session_for_another_workspace_is_refused_before_asking_the_agent(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            with pytest.raises(AcpWorkspaceBindingError) as caught:
                await client.open_session(cwd=other)
            with pytest.raises(AcpWorkspaceBindingError):
                await client.load_session("sess-00000000", cwd=other)
            # the same directory under another spelling is the same workspace
            link = tmp_path / "link"
            link.symlink_to(workspace)
            await client.open_session(cwd=link / ".")
    assert caught.value.bound == workspace and caught.value.requested.resolve() == other.resolve()
    assert str(other) in str(caught.value)
    assert len(fake_agent.frames_in("session/new")) == 1
    assert not fake_agent.frames_in("session/load")


# ---- the pool -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_pool_reuses_a_live_runtime_respawns_a_dead_one_and_discard_stops_it(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = _spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            pool: RuntimePool[AcpClient] = RuntimePool(tg, _prepare)
            try:
                first = await pool.get(spec)
                assert await pool.get(spec) is first
                assert fake_agent.spawns() == 1
                os.kill(first.runtime.pid, signal.SIGKILL)
                await until(lambda: not first.runtime.alive)
                second = await pool.get(spec)
                assert second is not first
                assert second.runtime.alive and second.runtime.pid != first.runtime.pid
                assert pool.runtimes() == [second.runtime]  # only the new one is served
                assert fake_agent.spawns() == 2
                await pool.discard(spec)
                assert pool.runtimes() == []
                assert second.runtime.process.returncode is not None
                assert not pid_alive(second.runtime.pid)
            finally:
                await pool.aclose()


# ---- session/load ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_loading_a_known_session_on_a_fresh_process_does_not_replay_its_history(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = _spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            session_id = (await client.open_session()).session_id
            first = await _turn(client.sessions[session_id], "remember PINEAPPLE")
            assert texts(first) == ["Echo: ", "remember PINEAPPLE"]
        async with _client(spec) as client:
            loaded = await client.load_session(session_id)
            assert not loaded.inbox.items
            events = await _turn(loaded, "SCN_STREAM")
    assert fake_agent.spawns() == 2
    replayed = [
        r["frame"]["params"]["update"]["content"]["text"]
        for r in fake_agent.records()
        if r.get("dir") == "out"
        and r.get("frame", {}).get("method") == "session/update"
        and r["frame"]["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    ]
    assert replayed == ["remember PINEAPPLE"]  # the agent did replay it: we did not show it
    assert texts(events) == ["Hello", ", ", "world"]
    assert not any("PINEAPPLE" in e.text for e in events)


@pytest.mark.anyio
async def test_loading_an_unknown_session_is_a_session_lost_error(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            with pytest.raises(AcpError) as caught:
                await client.load_session("sess-deadbeef")
    assert caught.value.kind == "session_lost"
    assert caught.value.transient is False


@asynccontextmanager
async def _stopped(pid: int) -> AsyncIterator[None]:
    """The agent is frozen (reads and answers nothing) until the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.anyio
async def test_a_load_the_agent_never_answers_times_out(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # The fake agent always answers session/load; freezing it with SIGSTOP makes it hang the way
    # kiro-cli does on an unknown or expired id.
    spec = _spec(fake_agent, workspace, request_timeout=1.0)
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            async with _stopped(client.runtime.pid):
                with pytest.raises(AcpRequestTimeout) as caught:
                    await client.load_session("sess-0badc0de")
    assert caught.value.method == "session/load"
    assert caught.value.timeout == 1.0


@pytest.mark.anyio
async def test_a_load_stopped_by_its_hard_cap_reports_that_cap(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, request_timeout=10.0)) as client:
            async with _stopped(client.runtime.pid):
                with pytest.raises(AcpRequestTimeout) as caught:
                    await client.load_session("sess-0badc0de", timeout=0.5)
    assert caught.value.timeout == 0.5
    assert "within 0.5 s" in str(caught.value)


@pytest.mark.anyio
async def test_a_relative_agent_path_runs_the_file_that_was_checked(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `SWITCHBOARD_AGENT_COMMAND=./bin/agent`: checked against Switchboard's own directory...
    here = tmp_path / "here"
    (here / "bin").mkdir(parents=True)
    wrapper = here / "bin" / "agent"
    argv = fake_agent.argv()
    wrapper.write_text(f'#!/bin/sh\nexec {argv[0]} {argv[1]} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.chdir(here)
    spec = RuntimeSpec(
        backend=get_backend("kiro"),
        argv=("./bin/agent", *argv[2:]),
        workspace=workspace,  # ...but spawned with cwd=workspace, where ./bin/agent is not
        request_timeout=10.0,
        initialize_timeout=10.0,
        shutdown_grace=0.5,
    )
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            assert client.runtime.alive
    assert fake_agent.spawns() == 1


def _venv_with_a_module_of_its_own(venv: Path) -> Path:
    """A virtual environment whose site-packages holds `only_in_this_venv`; its `bin/python`."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    assert python.is_symlink()
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    Path(purelib, "only_in_this_venv.py").write_text("PRESENT = True\n")
    return python


@pytest.mark.anyio
async def test_an_interpreter_inside_a_virtual_environment_keeps_its_environment(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    # `SWITCHBOARD_AGENT_COMMAND="/path/venv/bin/python agent.py"`: bin/python is a symlink to the
    # base interpreter, and only the path it is started by finds the environment's packages.
    python = _venv_with_a_module_of_its_own(tmp_path / "venv")
    argv = fake_agent.argv()
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import runpy, sys\nimport only_in_this_venv\n"
        f"sys.argv = [{argv[1]!r}, *sys.argv[1:]]\n"
        f"sys.path.insert(0, {str(Path(argv[1]).parent.parent.parent)!r})\n"
        f"runpy.run_path({argv[1]!r}, run_name='__main__')\n"
    )
    spec = RuntimeSpec(
        backend=get_backend("kiro"),
        argv=(str(python), str(agent), *argv[2:]),
        workspace=workspace,
        request_timeout=10.0,
        initialize_timeout=10.0,
        shutdown_grace=0.5,
    )
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            assert client.runtime.alive
    assert fake_agent.spawns() == 1
