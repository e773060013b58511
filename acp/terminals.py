"""`terminal/*` for the agent: commands run in the workspace, each behind its own wrapper.

Every terminal belongs to the session that created it (another session's id is unknown to it),
a session holds at most `MAX_TERMINALS_PER_SESSION` unreleased ones, and output is kept up to the
agent's `outputByteLimit` (capped by ours), dropping the oldest bytes at a character boundary.
The processes are hosted by the task group of `TerminalHost.serve`, which the runtime serves for
as long as the agent runs: when the agent goes, or a session closes, its terminals are killed,
and with them everything they started; nothing outlives either.

Each command runs behind `acp/_terminal_wrapper.py` (a child subreaper: when the command ends or
the terminal is killed or released, every process it started goes, `setsid` ones included), at
a lower CPU priority and in its session's CPU share (`acp/cpu_share.py`); with the agent's
sandbox, inside a sandbox of its own with the agent's view (and its own PID namespace).

`on_activity` is told (throttled) what a terminal is running and its last line of output, for a
status line."""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from acp.agent_env import terminal_environment
from acp.cpu_share import TERMINAL_NICE, CpuShares
from acp.sandbox import Isolation, launch_argv
from acp.terminal_output import OutputTail, ReadBudget
from acp.types import TerminalActivity
from acp.workspace_files import INVALID_PARAMS, ClientRequestRefused, confine

log = logging.getLogger(__name__)

MAX_TERMINALS_PER_SESSION = 8
DEFAULT_OUTPUT_LIMIT = 1024 * 1024
MAX_OUTPUT_LIMIT = 4 * 1024 * 1024
_READ_SIZE = 65536
ACTIVITY_INTERVAL = 1.0  # seconds between two status updates of one terminal
_SHOWN_COMMAND = 120
_DRAIN_AFTER_EXIT = 0.5  # seconds the output pipe may stay open after the command exited
_WRAPPER = str(Path(__file__).with_name("_terminal_wrapper.py"))

# A bare command with shell syntax in it (agents often send a whole command line as `command`).
_SHELL_SYNTAX = re.compile(r"[\s|&;<>()$`\\\"'*?\[\]#~=%]")


ActivitySink = Callable[[TerminalActivity], None]


def _refused(method: str, reason: str) -> ClientRequestRefused:
    return ClientRequestRefused(method, reason, code=INVALID_PARAMS)


def _argv(method: str, params: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    command = params.get("command")
    args = params.get("args") or []
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        raise _refused(method, "command must be a non-empty string")
    if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a for a in args):
        raise _refused(method, "args must be a list of strings")
    if not args and _SHELL_SYNTAX.search(command.strip()):
        return ["/bin/sh", "-c", command]
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise ClientRequestRefused(method, f"command {command[:_SHOWN_COMMAND]!r} was not found")
    return [found, *args]


def _environment(method: str, params: dict[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    env: dict[str, str] = {}
    given = params.get("env") or []
    if not isinstance(given, list):
        raise _refused(method, "env must be a list of {name, value}")
    for item in given:
        name = item.get("name") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if (
            not isinstance(name, str)
            or not name
            or "=" in name
            or "\x00" in name
            or not isinstance(value, str)
            or "\x00" in value
        ):
            raise _refused(method, "env must be a list of {name, value} strings")
        env[name] = value
    return terminal_environment(base, env)


def _output_limit(method: str, params: dict[str, Any]) -> int:
    limit = params.get("outputByteLimit")
    if limit is None:
        return DEFAULT_OUTPUT_LIMIT
    if type(limit) is not int or limit < 0:
        raise _refused(method, "outputByteLimit must be a non-negative integer")
    return min(limit, MAX_OUTPUT_LIMIT)


def _kill_group(pgid: int) -> None:
    if pgid <= 1:  # never our own group or everything
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def _told_once_ready() -> Iterator[None]:
    """Spawn the wrapper with SIGTERM blocked (a signal mask is inherited): a kill that comes
    while it starts waits until it can act on it, rather than ending it before it started the
    command (and so misreporting how the command ended)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _tell_wrapper(pid: int) -> None:
    """The wrapper kills everything the command started, then exits as the command did."""
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


class Terminal:
    def __init__(
        self,
        terminal_id: str,
        session_id: str,
        command: str,
        process: anyio.abc.Process,
        limit: int,
        on_activity: ActivitySink | None,
        reads: ReadBudget,
    ) -> None:
        self.id = terminal_id
        self.session_id = session_id
        self.command = command
        self.process = process
        self.output = OutputTail(limit)
        self._reads = reads
        self.exited = anyio.Event()
        self._drained = anyio.Event()
        self.exit_code: int | None = None
        self.signal: str | None = None
        self._on_activity = on_activity
        self._last_activity = 0.0

    def exit_status(self) -> dict[str, Any] | None:
        if not self.exited.is_set():
            return None
        return {"exitCode": self.exit_code, "signal": self.signal}

    def kill(self) -> None:
        if not self.exited.is_set() and self.process.returncode is None:
            _tell_wrapper(self.process.pid)

    def _tell(self, *, force: bool = False) -> None:
        if self._on_activity is None:
            return
        now = time.monotonic()
        if not force and now - self._last_activity < ACTIVITY_INTERVAL:
            return
        self._last_activity = now
        activity = TerminalActivity(
            self.session_id,
            self.id,
            self.command,
            self.output.last_line(),
            self.exited.is_set(),
        )
        try:
            self._on_activity(activity)
        except Exception:  # a status line must never break the terminal
            log.exception("terminal activity sink failed")

    async def run(self) -> None:
        """Pump output and wait for the exit; on the way out (release, shutdown) kill the group."""
        try:
            self._tell(force=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump)
                returncode = await self.process.wait()
                # The output it wrote before exiting is in it; a child of it that still holds
                # the pipe does not hold the exit back (what it writes later is kept too).
                with anyio.move_on_after(_DRAIN_AFTER_EXIT):
                    await self._drained.wait()
                self._record(returncode)
                self.exited.set()
                self._tell(force=True)
        finally:
            with anyio.CancelScope(shield=True):
                if self.process.returncode is None:  # once reaped, its pid may be another's
                    _tell_wrapper(self.process.pid)
                    with anyio.move_on_after(1.0):
                        await self.process.wait()
                if self.process.returncode is None:  # a wrapper that did not end in time
                    _kill_group(self.process.pid)
                await self.process.aclose()
                if not self.exited.is_set():
                    self._record(self.process.returncode)
                    self.exited.set()

    def _record(self, returncode: int | None) -> None:
        if returncode is None:
            return
        if returncode < 0:
            try:
                self.signal = signal.Signals(-returncode).name
            except ValueError:
                self.signal = f"signal {-returncode}"
        else:
            self.exit_code = returncode

    async def _pump(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            try:
                chunk = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._drained.set()
                return
            self.output.add(chunk)
            self._tell()
            await self._reads.spend(len(chunk))  # past the agent's rate the command waits


class TerminalHost:
    """The terminals of one agent process, hosted by `serve`'s task group."""

    def __init__(
        self,
        workspace: Path,
        env: Mapping[str, str],
        isolation: Isolation | None = None,
        tmp: Path | None = None,
    ) -> None:
        self.workspace = workspace
        self.env = env
        self.isolation = isolation or Isolation()
        self.tmp = tmp  # the agent's private /tmp, which its terminals see too
        self.cpu = CpuShares()
        self.reads = ReadBudget()  # shared by this agent's terminals
        self.on_activity: ActivitySink | None = None
        self._terminals: dict[str, Terminal] = {}
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._ids = itertools.count(1)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._tg = None
            self.kill_all()
            self.cpu.close()

    def kill_all(self) -> None:
        """The agent is gone: so are the commands it started."""
        for terminal in list(self._terminals.values()):
            terminal.kill()

    def release_session(self, session_id: str) -> None:
        for terminal in list(self._terminals.values()):
            if terminal.session_id == session_id:
                self._release(terminal)

    def _release(self, terminal: Terminal) -> None:
        terminal.kill()
        self._terminals.pop(terminal.id, None)
        scope = self._scopes.pop(terminal.id, None)
        if scope is not None:
            scope.cancel()

    def _terminal(self, method: str, session_id: str, params: dict[str, Any]) -> Terminal:
        terminal_id = params.get("terminalId")
        terminal = self._terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None or terminal.session_id != session_id:
            # Another session's terminal is as unknown as one that never existed.
            raise _refused(method, f"no terminal {str(terminal_id)[:80]!r} in this session")
        return terminal

    async def create(self, session_id: str, params: dict[str, Any]) -> dict[str, Any]:
        method = "terminal/create"
        if self._tg is None:
            raise ClientRequestRefused(method, "terminals are not available right now")
        owned = sum(1 for t in self._terminals.values() if t.session_id == session_id)
        if owned >= MAX_TERMINALS_PER_SESSION:
            raise ClientRequestRefused(
                method,
                f"this session already has {owned} terminals; release one first",
            )
        argv = _argv(method, params, self.env)
        cwd_raw = params.get("cwd")
        cwd = self.workspace if cwd_raw is None else confine(method, self.workspace, cwd_raw)
        if not cwd.is_dir():
            raise _refused(method, f"cwd {str(cwd_raw)[:300]!r} is not a directory")
        env = _environment(method, params, self.env)
        limit = _output_limit(method, params)
        command = params["command"]
        line = " ".join([command, *(params.get("args") or [])])[:_SHOWN_COMMAND]
        wrapped = self._wrapped(session_id, argv, cwd, env)
        try:
            with _told_once_ready():
                process = await anyio.open_process(
                    wrapped,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    cwd=str(cwd),
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            raise ClientRequestRefused(
                method, f"{command[:_SHOWN_COMMAND]!r} could not be started ({exc.strerror})"
            ) from None
        terminal_id = f"term-{next(self._ids)}-{secrets.token_hex(4)}"
        terminal = Terminal(
            terminal_id, session_id, line, process, limit, self.on_activity, self.reads
        )
        scope = anyio.CancelScope()
        self._terminals[terminal_id] = terminal
        self._scopes[terminal_id] = scope
        self._tg.start_soon(self._host, terminal, scope)
        log.info("terminal %s started pid=%d: %s", terminal_id, process.pid, line)
        return {"terminalId": terminal_id}

    def _wrapped(
        self, session_id: str, argv: list[str], cwd: Path, env: Mapping[str, str]
    ) -> list[str]:
        """The wrapper's command line around the command (in its sandbox, if the agent has one)."""
        inner = launch_argv(
            self.isolation, argv, workspace=self.workspace, cwd=cwd, tmp=self.tmp, env=env
        )
        options = ["--nice", str(TERMINAL_NICE)]
        procs = self.cpu.procs_file(session_id)
        if procs is not None:
            options += ["--cgroup", str(procs)]
        user = self.isolation.user
        if user is not None:
            options += ["--uid", str(user.uid), "--gid", str(user.gid)]
        return [sys.executable, "-I", "-S", _WRAPPER, *options, "--", *inner]

    async def _host(self, terminal: Terminal, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await terminal.run()
        finally:
            self._scopes.pop(terminal.id, None)
            # its processes are gone now: the session's cgroup goes with its last terminal
            session = terminal.session_id
            if not any(
                t.session_id == session and not t.exited.is_set() for t in self._terminals.values()
            ):
                self.cpu.release(session)

    async def output(self, session_id: str, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._terminal("terminal/output", session_id, params)
        return {
            "output": terminal.output.text(),
            "truncated": terminal.output.truncated,
            "exitStatus": terminal.exit_status(),
        }

    async def wait_for_exit(self, session_id: str, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._terminal("terminal/wait_for_exit", session_id, params)
        await terminal.exited.wait()
        return {"exitCode": terminal.exit_code, "signal": terminal.signal}

    async def kill(self, session_id: str, params: dict[str, Any]) -> None:
        self._terminal("terminal/kill", session_id, params).kill()

    async def release(self, session_id: str, params: dict[str, Any]) -> None:
        self._release(self._terminal("terminal/release", session_id, params))
