"""`AcpRuntime`: one agent process bound to one (backend, workspace).

The executable is resolved before spawning. The process runs in its own process group (agents
fork children: kiro-cli-chat, native codex/claude binaries, MCP servers), its stderr is drained
continuously into a bounded ring buffer (a full pipe would block the agent), and shutdown walks
the ladder: close stdin, wait, SIGTERM the group, SIGKILL the group. An agent that ignored a
cancel is abandoned: it is known to hang, so the ladder does not wait for it to exit by itself."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from acp._dispatch import redact
from acp.agent_env import agent_environment
from acp.agent_reports import ADVERTISED as REPORTS_ADVERTISED
from acp.backends import Backend
from acp.client_methods import ClientMethods
from acp.sandbox import Isolation, launch_argv, prepare_private_tmp, remove_private_tmp
from acp.session_handle import (
    DEFAULT_MAX_LINE_BYTES,
    AcpRequestTimeout,
    AcpRuntimeDead,
    AcpRuntimeError,
    RpcReply,
    SessionHandle,
)
from acp.steering import advertises_steering

log = logging.getLogger(__name__)

CLIENT_NAME = "switchboard"
CLIENT_VERSION = "0.1.0"
STDERR_TAIL_BYTES = 64 * 1024
# Each signal of the ladder gets this long to take effect (a hung agent: a short while only, so a
# timed-out `ask` still exits within a few seconds of its timeout).
SIGNAL_GRACE = 1.5
ABANDONED_SIGNAL_GRACE = 0.5


class AcpSpawnFailed(AcpRuntimeError):
    def __init__(self, command: str, reason: str) -> None:
        self.command = command
        self.reason = reason
        super().__init__(
            f"Could not start the agent: {command!r} {reason}. Install it, or point Switchboard "
            "at another command with --agent-command or SWITCHBOARD_AGENT_COMMAND."
        )


class AcpWorkspaceBindingError(AcpRuntimeError):
    def __init__(self, bound: Path, requested: Path) -> None:
        self.bound = bound
        self.requested = requested
        super().__init__(
            f"This agent process works in {bound}; a session for {requested} needs its own."
        )


def resolve_executable(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    if not argv or not argv[0]:
        raise AcpSpawnFailed("", "is empty: no agent command is configured")
    program = argv[0]
    if os.sep in program:
        path = Path(program)
        if not path.is_file():
            raise AcpSpawnFailed(program, "was not found")
        if not os.access(path, os.X_OK):
            raise AcpSpawnFailed(program, "is not executable")
        # Absolute, because the agent runs in the workspace, not here; but not resolved: a
        # virtual environment's `bin/python` is a symlink, and the environment is found from the
        # path it was started by, so following the link would lose it.
        return [os.path.abspath(program), *argv[1:]]
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise AcpSpawnFailed(program, "was not found on PATH")
    return [found, *argv[1:]]


class StderrTail:
    """The last few KiB of the agent's stderr, for error reports and logs."""

    def __init__(self, max_bytes: int = STDERR_TAIL_BYTES) -> None:
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._max = max_bytes

    def add(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self._max and len(self._chunks) > 1:
            self._size -= len(self._chunks.popleft())

    def text(self, max_lines: int = 20) -> str:
        data = b"".join(self._chunks)[-self._max :]
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-max_lines:])


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    backend: Backend
    argv: tuple[str, ...]
    workspace: Path
    env: Mapping[str, str] = field(default_factory=agent_environment)
    isolation: Isolation = field(default_factory=Isolation)  # no sandbox unless planned
    request_timeout: float = 30.0
    initialize_timeout: float = 90.0
    shutdown_grace: float = 2.0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


class AcpRuntime:
    def __init__(
        self, spec: RuntimeSpec, process: anyio.abc.Process, *, tmp: Path | None = None
    ) -> None:
        self.spec = spec
        self.process = process
        # monotonic, taken at spawn (open_runtime builds us right after the process starts)
        self.started_at = time.monotonic()
        self.stderr = StderrTail()
        assert process.stdin is not None and process.stdout is not None
        self.handle = SessionHandle(
            process.stdin,
            process.stdout,
            max_line_bytes=spec.max_line_bytes,
            death_cause=self._death_cause,
        )
        self.agent_capabilities: dict[str, Any] = {}
        self.steering = False  # `initialize` advertised `_session/steering` (acp.steering)
        self.agent_info: dict[str, Any] = {}
        self.auth_methods: list[dict[str, Any]] = []  # how the agent says one signs it in
        self.auth_status = ""  # claude/codex announce it: "none" means not signed in
        self.stopping = False  # set once shutdown begins: an exit after that is expected
        self.abandoned = False  # it ignored a cancel: being stopped, never handed out again
        self._tg: anyio.abc.TaskGroup | None = None  # serve_runtime's, while it serves us
        # fs/* and terminal/* for the agent; its terminals live in serve_runtime's task group
        self.client_methods = ClientMethods(spec.workspace, spec.env, spec.isolation, tmp)
        self.handle.listen(self._on_notification)

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "_auth/status_update" and isinstance(params, dict):
            status = params.get("authStatus")
            if isinstance(status, dict) and isinstance(status.get("kind"), str):
                self.auth_status = status["kind"]

    @property
    def backend(self) -> Backend:
        return self.spec.backend

    @property
    def workspace(self) -> Path:
        return self.spec.workspace

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return not self.abandoned and self.handle.dead is None and self.process.returncode is None

    def abandon(self) -> None:
        """The agent ignored a cancel: stop its process group now (in the background), and never
        give it another prompt. Whoever asks for this runtime next gets a fresh one."""
        if self.abandoned:
            return
        self.abandoned = True
        log.info("stopping the agent pid=%d: it did not answer a cancel", self.pid)
        if self._tg is not None:
            self._tg.start_soon(self.shutdown)

    def breadcrumbs(self) -> str:
        """Where a crash report should start looking: this agent and what it was last doing."""
        frames = ",".join(self.handle.recent_frames) or "none"
        return f"agent={self.backend.name} agent_pid={self.pid} last_frames={frames}"

    def check_workspace(self, requested: Path) -> None:
        if requested.resolve() != self.workspace.resolve():
            raise AcpWorkspaceBindingError(self.workspace, requested)

    async def call(self, method: str, params: Any, *, timeout: float | None = None) -> RpcReply:
        try:
            return await self.handle.call(
                method, params, timeout=self.spec.request_timeout if timeout is None else timeout
            )
        except AcpRequestTimeout as exc:
            self._log_stderr_tail(f"did not answer {method} within {exc.timeout:g} s")
            raise

    def _log_stderr_tail(self, what: str) -> None:
        """The error a person reads points here: the agent's own words about what went wrong."""
        tail = self.stderr.text()
        said = f"; its last stderr lines:\n{redact(tail)}" if tail.strip() else "; no stderr"
        log.warning("agent %s pid=%d %s%s", self.backend.name, self.pid, what, said)

    async def initialize(self) -> RpcReply:
        params = {
            "protocolVersion": self.backend.protocol_version,
            # auth.terminal: an agent may offer a terminal sign-in, which we name as a command;
            # elicitation: the agent's questions (acp.elicitation), as forms and as links
            "clientCapabilities": {
                **self.client_methods.advertised(),
                "auth": {"terminal": True},
                "elicitation": {"form": {}, "url": {}},
                # plans by id, subagent sessions, notices, compactions (acp/agent_reports.py)
                **REPORTS_ADVERTISED,
            },
            "clientInfo": {"name": CLIENT_NAME, "title": "Switchboard", "version": CLIENT_VERSION},
        }
        reply = await self.call("initialize", params, timeout=self.spec.initialize_timeout)
        if reply.error is None and isinstance(reply.result, dict):
            caps = reply.result.get("agentCapabilities")
            self.agent_capabilities = caps if isinstance(caps, dict) else {}
            self.steering = advertises_steering(reply.result)
            info = reply.result.get("agentInfo")
            self.agent_info = info if isinstance(info, dict) else {}
            methods = reply.result.get("authMethods")
            self.auth_methods = [
                method
                for method in (methods if isinstance(methods, list) else [])[:8]
                if isinstance(method, dict)
            ]
        return reply

    async def _drain_stderr(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        while True:
            try:
                chunk = await stream.receive(65536)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            self.stderr.add(chunk)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("agent stderr: %s", chunk[:2000].decode("utf-8", "replace").rstrip())

    async def _death_cause(self) -> AcpRuntimeDead:
        self.client_methods.terminals.kill_all()  # the agent is gone: so are its commands
        with anyio.move_on_after(1.0):
            await self.process.wait()
        await anyio.lowlevel.checkpoint()  # let the stderr drain pick up the last words
        if not self.stopping:
            code = self.process.returncode
            status = "" if code is None else f" (exit code {code})"
            self._log_stderr_tail(f"stopped unexpectedly{status}")
        return AcpRuntimeDead(self.process.returncode, self.stderr.text())

    async def shutdown(self) -> None:
        """close stdin -> wait -> SIGTERM the group -> SIGKILL the group. Bounded and shielded."""
        self.stopping = True
        self.client_methods.terminals.kill_all()
        with anyio.CancelScope(shield=True):
            stdin = self.process.stdin
            if stdin is not None:
                try:
                    await stdin.aclose()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
            signal_grace = SIGNAL_GRACE
            if self.abandoned:
                signal_grace = ABANDONED_SIGNAL_GRACE
            else:
                with anyio.move_on_after(self.spec.shutdown_grace):
                    await self._wait_group_gone()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not _signal_group(self.process.pid, sig):
                    return
                with anyio.move_on_after(signal_grace):
                    await self._wait_group_gone()
                    return

    async def _wait_group_gone(self) -> None:
        """Wait until the agent and every process of its group have exited. The agent itself is
        awaited; its forked children (kiro-cli-chat, codex's native binary) are not ours to wait
        for, and nothing signals their exit, so the group is probed until it is empty."""
        await self.process.wait()
        while _group_alive(self.process.pid):  # noqa: ASYNC110 - no event exists for a group
            await anyio.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    if pgid <= 1:  # not a group of ours: 0 is our own group, 1 and below reach everything
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies have exited: they only wait for
    whoever reaps orphans, which can be slow in a container."""
    if pgid <= 1:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                fields = stat_file.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


@asynccontextmanager
async def open_runtime(spec: RuntimeSpec) -> AsyncIterator[AcpRuntime]:
    """Spawn and initialize an agent; on exit shut it down, whatever happened."""
    argv = resolve_executable(spec.argv, spec.env)
    isolation = spec.isolation
    tmp = prepare_private_tmp(isolation)
    launch = launch_argv(
        isolation, argv, workspace=spec.workspace, cwd=spec.workspace, tmp=tmp, env=spec.env
    )
    as_user = isolation.user.spawn_options() if isolation.user is not None else {}
    try:
        process = await anyio.open_process(
            launch,
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            cwd=str(spec.workspace),
            env=dict(spec.env),
            start_new_session=True,
            **as_user,
        )
    except OSError as exc:
        remove_private_tmp(tmp)
        raise AcpSpawnFailed(argv[0], f"could not be started ({exc.strerror or exc})") from exc
    sandboxed = " in its sandbox" if isolation.sandboxed else ""
    log.info(
        "started agent %s pid=%d in %s%s", spec.backend.name, process.pid, spec.workspace, sandboxed
    )
    try:
        async with serve_runtime(AcpRuntime(spec, process, tmp=tmp)) as runtime:
            yield runtime
    finally:
        with anyio.CancelScope(shield=True):
            _signal_group(process.pid, signal.SIGKILL)
            with anyio.move_on_after(1.0):
                await process.wait()
        await process.aclose()
        remove_private_tmp(tmp)
        log.info("agent %s pid=%d stopped", spec.backend.name, process.pid)


@asynccontextmanager
async def serve_runtime(runtime: AcpRuntime) -> AsyncIterator[AcpRuntime]:
    """Serve a started agent's pipes (stderr drain, JSON-RPC reader) for the body, then walk the
    shutdown ladder. The process may be any `anyio.abc.Process`: a benchmark's in-process agent
    uses the same runtime, handle and tasks as a spawned one."""
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(runtime._drain_stderr)
        tg.start_soon(runtime.handle.serve)
        await tg.start(runtime.client_methods.terminals.serve)
        runtime._tg = tg
        try:
            yield runtime
        except Exception as exc:  # re-raised below, outside the task group, unwrapped
            failure = exc
        finally:
            runtime._tg = None
            await runtime.shutdown()
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


# How a pool starts the runtime for a spec and stops it on exit: `open_runtime` spawns the agent's
# process; a benchmark plugs in an agent that lives in this process.
RuntimeOpener = Callable[[RuntimeSpec], AbstractAsyncContextManager[AcpRuntime]]
