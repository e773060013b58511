"""Issue 21: the agent runs where it cannot see Switchboard. The scripted agent (a real
subprocess) under real bubblewrap asks for terminals that look for Switchboard's state, config,
processes and environment; and what a terminal starts, `setsid` included, ends with it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    AcpSession,
    Isolation,
    RuntimeSpec,
    agent_environment,
    describe_cpu_limits,
    get_backend,
    plan_isolation,
)
from tests.acp_helpers import collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, pid_alive, script

WAIT = 60  # seconds: an upper bound on every test here, never a measurement
TOKEN = "123456:AAsecret-telegram-token"

BWRAP = shutil.which("bwrap")
if BWRAP is None:  # the isolation tests need the real thing; never skipped
    pytest.fail(
        "bubblewrap is missing: apt-get install bubblewrap (tests/fakes/install_bwrap.sh)",
        pytrace=False,
    )


def _request(method: str, save: str | None = None, **params: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"request": {"method": method, "params": params}}
    if save is not None:
        step["save"] = save
    return step


def _run(command: str) -> list[dict[str, Any]]:
    """The steps that run `command` in a terminal and read its output."""
    return [
        _request("terminal/create", save="t", command=command),
        _request("terminal/wait_for_exit", terminalId="$t.terminalId"),
        _request("terminal/output", terminalId="$t.terminalId"),
    ]


async def _replies(session: AcpSession, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    got = await collect_turn(session, script(*steps))
    return [json.loads(t[len("reply:") :]) for t in texts(got) if t.startswith("reply:")]


async def _output(session: AcpSession, command: str) -> str:
    output = (await _replies(session, *_run(command)))[-1]["result"]["output"]
    assert isinstance(output, str)
    return output


class Host:
    """Switchboard's side: a state directory and a config file holding a token, beside a
    workspace; PATH names the directory that holds both (a read-only view of it must not show
    them)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir()
        (self.state_dir / "state.db").write_text(f"approval token {TOKEN}")
        self.config = tmp_path / "config.json"
        self.config.write_text(json.dumps({"telegram": {"token": TOKEN}}))
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        # the agent's log lives where the agent may write: its workspace
        self.agent = FakeAgent(self.workspace / "agent-log.jsonl", self.workspace / "agent-state")
        self.agent.state_dir.mkdir()

    def isolation(self, mode: str) -> Isolation:
        return plan_isolation(
            "bwrap" if mode == "bwrap" else "off",
            home=self.root / "agent-home",
            home_chosen=False,
            hidden=[self.state_dir, self.config],
        )

    def spec(self, isolation: Isolation, monkeypatch: pytest.MonkeyPatch) -> RuntimeSpec:
        monkeypatch.setenv("PATH", f"{self.root}:{os.environ['PATH']}")
        monkeypatch.setenv("SWITCHBOARD_TELEGRAM__TOKEN", TOKEN)
        env = agent_environment(preset="kiro", home=isolation.home)
        return RuntimeSpec(
            backend=get_backend("kiro"),
            argv=tuple(self.agent.argv()),
            workspace=self.workspace,
            env=env,
            isolation=isolation,
            request_timeout=20.0,
            initialize_timeout=20.0,
            shutdown_grace=0.5,
        )


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def _descendants(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes().rpartition(b")")[2].split()
            except OSError:
                continue
            if int(stat[1]) == parent:
                found.append(int(entry))
                todo.append(int(entry))
    return found


def _pids_running(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (a sleep of a duration no one else uses)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline.split(b"\0") and pid_alive(int(entry)):
                pids.append(int(entry))
    return pids


def _proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[16])


@pytest.mark.anyio
async def test_the_sandboxed_agent_cannot_see_switchboards_state_config_or_processes(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolation = host.isolation("bwrap")
    assert isolation.sandboxed
    spec = host.spec(isolation, monkeypatch)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            listing = await _output(session, f"ls -a {host.state_dir}; echo end")
            config = await _output(session, f"cat {host.config}; echo end")
            environ = await _output(session, f"cat /proc/{os.getpid()}/environ; echo end")
            procs = await _output(session, "ls /proc | grep -c '^[0-9]'")
            env = await _output(session, "env")
            home = await _output(session, "echo $HOME; touch $HOME/mine /tmp/scratch && echo ok")
            workspace = await _output(session, "echo hi > made-here && cat made-here")
            agent_pids = _descendants(client.runtime.pid)
            agent_environs = [_proc_file(pid, "environ") for pid in agent_pids]
    assert "state.db" not in listing and listing.endswith("end\n")
    assert TOKEN not in config and config.endswith("end\n")
    assert TOKEN not in environ and "SWITCHBOARD" not in environ
    assert int(procs) < 6  # its own sandbox's few processes, none of the host's
    assert TOKEN not in env and "SWITCHBOARD_" not in env
    assert home.splitlines() == [str(host.root / "agent-home"), "ok"]
    assert workspace == "hi\n" and (host.workspace / "made-here").read_text() == "hi\n"
    assert (host.root / "agent-home" / "mine").exists()
    assert (host.root / "agent-home").stat().st_mode & 0o777 == 0o700
    assert agent_environs and all(
        TOKEN.encode() not in e and b"SWITCHBOARD_" not in e for e in agent_environs
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["bwrap", "off"])
@pytest.mark.parametrize("end", ["terminal/release", "terminal/kill"])
async def test_a_setsid_child_of_a_terminal_is_gone_when_the_terminal_ends(
    host: Host, monkeypatch: pytest.MonkeyPatch, mode: str, end: str, tmp_path: Path
) -> None:
    marker = f"1000.{abs(hash((str(tmp_path), mode, end))) % 10**6}"
    spec = host.spec(host.isolation(mode), monkeypatch)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            started = _request("terminal/create", save="t", command=f"setsid sleep {marker} &")
            await collect_turn(session, script(started, {"sleep": 0.3}))
            # the command (a shell) ended at once: what it started is gone with it
            while _pids_running(marker):
                await anyio.sleep(0.05)
            long = f"setsid sleep {marker} & sleep {marker}"
            created = await _replies(session, _request("terminal/create", command=long))
            terminal_id = created[0]["result"]["terminalId"]
            while len(_pids_running(marker)) < 2:
                await anyio.sleep(0.05)
            running = _pids_running(marker)
            assert all(_nice(pid) > _nice(os.getpid()) for pid in running)
            if "cgroup" in describe_cpu_limits():
                cgroups = [_proc_file(pid, "cgroup") for pid in running]
                assert all(b"switchboard-terminals-" in text for text in cgroups)
            await _replies(session, _request(end, terminalId=terminal_id))
            while _pids_running(marker):
                await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_terminals_die_with_their_sandboxed_agent(
    host: Host, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marker = f"1000.{abs(hash(str(tmp_path))) % 10**6}"
    spec = host.spec(host.isolation("bwrap"), monkeypatch)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            command = f"setsid sleep {marker} & sleep {marker}"
            await collect_turn(session, script(_request("terminal/create", command=command)))
            while len(_pids_running(marker)) < 2:
                await anyio.sleep(0.05)
        while _pids_running(marker):
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_a_state_file_in_the_workspace_is_covered_and_the_workspace_still_works(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = host.workspace / "state.db"
    state.write_text(f"approval token {TOKEN}")
    isolation = plan_isolation(
        "bwrap",
        home=host.root / "agent-home",
        home_chosen=False,
        hidden=[host.workspace, state, Path(f"{state}-wal")],
    )
    spec = host.spec(isolation, monkeypatch)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            seen = await _output(session, "cat state.db; echo hi > new-file; cat new-file")
    assert TOKEN not in seen and seen.endswith("hi\n")
    assert state.read_text() == f"approval token {TOKEN}"
