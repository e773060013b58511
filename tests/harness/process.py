"""`switchboard run` as a subprocess, the way every end-to-end test starts and stops it.

Two shapes, for two kinds of test: `switchboard_process`, an anyio process yielded once it is ready
and required to exit 0 on SIGTERM (one process, awaited in the test's own loop); and `spawn_run` /
`stop_run`, a `Popen` writing to a log file (several replicas, or a run whose log a failed wait
prints, polled from the test's loop)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tests.conftest import FakeAgent
from tests.engine_helpers import wait_for

COMMAND = [sys.executable, "-m", "bot", "run"]
# Up and receiving: a bound for a start-up on two cores shared by several suites, not a claim
# about how fast Switchboard starts.
START_TIMEOUT = 40.0
STOP_TIMEOUT = 10.0


def run_env(fake_agent: FakeAgent, workspace: Path) -> dict[str, str]:
    """The agent and its workspace for `switchboard run` (add to conftest's `cli_env`, whose state
    file is beside the workspace, never in it)."""
    return {
        "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
        "SWITCHBOARD_WORKSPACE": str(workspace),
    }


def clean_environ(*prefixes: str) -> dict[str, str]:
    """This process's environment without the caller's SWITCHBOARD_* and FAKE_AGENT* settings
    (and any other `prefixes`), so nothing of the shell the suite runs in reaches a run."""
    dropped = ("SWITCHBOARD_", "FAKE_AGENT", *prefixes)
    return {name: value for name, value in os.environ.items() if not name.startswith(dropped)}


@asynccontextmanager
async def switchboard_process(
    env: dict[str, str],
    cwd: Path,
    *,
    ready: Callable[[], object],
    what: str = "switchboard to receive updates",
    ready_timeout: float = START_TIMEOUT,
    stop_timeout: float = STOP_TIMEOUT,
    log: Path | None = None,
    **options: Any,
) -> AsyncIterator[anyio.abc.Process]:
    """`switchboard run`, yielded once `ready()` holds; on the way out stopped with SIGTERM, on
    which it must exit 0, unless the test ended it; killed whatever happens. With `log`, its
    stdout and stderr go to that file, whose tail a failed exit shows; `options` go to
    `anyio.open_process`."""
    with contextlib.ExitStack() as files:
        if log is not None:
            sink = files.enter_context(log.open("ab"))
            options |= {"stdout": sink, "stderr": sink}
        async with await anyio.open_process(COMMAND, env=env, cwd=cwd, **options) as process:
            try:
                await wait_for(ready, what, ready_timeout)
                yield process
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                    with anyio.fail_after(stop_timeout):
                        code = await process.wait()
                    assert code == 0, _tail(log)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()


def _tail(log: Path | None, lines: int = 40) -> str:
    if log is None:
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spawn_run(env: dict[str, str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """`switchboard run` in a session of its own (a Ctrl-C of the test run is ours to pass on),
    its stdout and stderr appended to `log_path`."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            COMMAND,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def stop_run(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM, as an orchestrator stops it; SIGKILL when it has not exited within `timeout`
    seconds. Its exit status, or None when it had to be killed."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return await anyio.to_thread.run_sync(proc.wait, timeout)
    except subprocess.TimeoutExpired:
        kill_run(proc, timeout)
        return None


def kill_run(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGKILL: no shutdown, no goodbyes; its agents lose their stdin and go."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)


def port_open(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def kill_pids(pids: list[int]) -> None:
    """SIGKILL to each of `pids` still alive: processes a killed run could not stop."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
