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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any, Generic, TypeVar, cast

import anyio
import anyio.abc
import anyio.lowlevel

from acp._dispatch import redact
from acp.agent_env import agent_environment
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

log = logging.getLogger(__name__)
T = TypeVar("T")

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

    @property
    def supports_load(self) -> bool:
        return bool(self.agent_capabilities.get("loadSession"))

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
            # auth.terminal: an agent may offer a terminal sign-in, which we name as a command
            "clientCapabilities": {**self.client_methods.advertised(), "auth": {"terminal": True}},
            "clientInfo": {"name": CLIENT_NAME, "title": "Switchboard", "version": CLIENT_VERSION},
        }
        reply = await self.call("initialize", params, timeout=self.spec.initialize_timeout)
        if reply.error is None and isinstance(reply.result, dict):
            caps = reply.result.get("agentCapabilities")
            self.agent_capabilities = caps if isinstance(caps, dict) else {}
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

# One runtime per (preset, command line, workspace): two agents of the same preset started by
# different commands are two agents, and one agent in two folders is two processes (an agent's
# session/new takes any cwd, but its fs/* and terminals are confined to the folder it runs in).
PoolKey = tuple[str, tuple[str, ...], Path]

# How often a turn waiting for a free agent looks again whether one became idle: nothing in the
# pool hears a turn end (the caller may say so with `notify_idle`); this bounds the wait past it.
IDLE_RECHECK = 0.1


def pool_key(spec: RuntimeSpec) -> PoolKey:
    return (spec.backend.name, spec.argv, spec.workspace.resolve())


def _always_idle(_value: Any) -> bool:
    return True


class _Waiter:
    """One `get`'s `on_wait`, said at most once, in the background: a conversation's delivery
    must neither hold up the pool nor, failing, reach the owner's task group."""

    __slots__ = ("on_wait", "told")

    def __init__(self, on_wait: Callable[[], Awaitable[None]] | None) -> None:
        self.on_wait = on_wait
        self.told = False

    def tell(self, tg: anyio.abc.TaskGroup) -> None:
        if self.told or self.on_wait is None:
            return
        self.told = True
        tg.start_soon(self._say, self.on_wait)

    @staticmethod
    async def _say(on_wait: Callable[[], Awaitable[None]]) -> None:
        try:
            await on_wait()
        except Exception:
            log.exception("unexpected fault while saying that a turn waits for an agent")


class _Slot:
    __slots__ = ("done", "last_used", "runtime", "stop", "value")

    def __init__(self) -> None:
        self.stop = anyio.Event()
        self.done = anyio.Event()
        self.runtime: AcpRuntime | None = None
        self.value: Any = None
        self.last_used = time.monotonic()


class RuntimePool(Generic[T]):
    """Agent processes keyed by `pool_key` (preset, command line, workspace), each hosted by a
    task of the owner's task group. `prepare` turns a fresh runtime into what callers use (e.g.
    an initialized client); a runtime that died is replaced on the next `get`. `opener` starts
    one (default: spawn the agent's process).

    Spawning takes a lock per key only: one slow agent start holds up nobody else's. With
    `max_live`, at most that many agent processes live (starting, serving or stopping): a new one
    first stops the least recently used idle one (`is_idle(value)`: the caller knows whether a
    turn runs on it), else waits until one is idle, telling each waiting caller once
    (`on_wait`).
    `reap_idle` stops runtimes unused for a while; `on_stop(value)` hears of every runtime the
    pool stops by itself (evicted or reaped), so callers drop what they hold of it."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        prepare: Callable[[AcpRuntime], Awaitable[T]],
        *,
        opener: RuntimeOpener = open_runtime,
        max_live: int | None = None,
        is_idle: Callable[[T], bool] = _always_idle,
        on_stop: Callable[[T], None] | None = None,
    ) -> None:
        if max_live is not None and max_live < 1:
            raise ValueError("max_live must be at least 1")
        self._tg = tg
        self._prepare = prepare
        self._opener = opener
        self._max_live = max_live
        self._is_idle = is_idle
        self._on_stop = on_stop
        self._slots: dict[PoolKey, _Slot] = {}
        self._locks: dict[PoolKey, anyio.Lock] = {}
        self._starting = 0
        self._stopping = 0
        self._changed = anyio.Event()
        # Gets queued behind a key's lock, and the keys whose start waits for room: all of
        # them are told, not only the one holding the lock.
        self._queued: dict[PoolKey, set[_Waiter]] = {}
        self._room_wait: set[PoolKey] = set()

    @property
    def live(self) -> int:
        """Agent processes counted against the cap: serving, being started or being stopped."""
        return len(self._slots) + self._starting + self._stopping

    async def get(
        self, spec: RuntimeSpec, *, on_wait: Callable[[], Awaitable[None]] | None = None
    ) -> T:
        """The live runtime for `spec`, started on demand. When its start must wait for a
        busy agent to become idle, `on_wait` is called once, in the background (also for the
        gets queued behind that start); the caller's deadline bounds the wait."""
        key = pool_key(spec)
        lock = self._locks.setdefault(key, anyio.Lock())
        waiter = _Waiter(on_wait)
        if key in self._room_wait:
            waiter.tell(self._tg)
        queued = self._queued.setdefault(key, set())
        queued.add(waiter)
        try:
            async with lock:
                return await self._get_locked(key, spec)
        finally:
            queued.discard(waiter)
            if not queued:
                self._queued.pop(key, None)

    async def _get_locked(self, key: PoolKey, spec: RuntimeSpec) -> T:
        slot = self._slots.get(key)
        if slot is not None and slot.runtime is not None and slot.runtime.alive:
            slot.last_used = time.monotonic()
            return cast(T, slot.value)
        if slot is not None:
            await self._stop(key, slot)
        await self._make_room(key)
        slot = _Slot()
        try:
            value: T = await self._tg.start(self._host, spec, slot)
        finally:
            self._starting -= 1
            self._wake()
        slot.last_used = time.monotonic()
        self._slots[key] = slot
        return value

    def runtime_for(self, spec: RuntimeSpec) -> AcpRuntime | None:
        slot = self._slots.get(pool_key(spec))
        return slot.runtime if slot is not None else None

    def runtimes(self) -> list[AcpRuntime]:
        """The runtimes serving now, least recently used first."""
        slots = sorted(self._slots.values(), key=lambda slot: slot.last_used)
        return [slot.runtime for slot in slots if slot.runtime is not None]

    def notify_idle(self) -> None:
        """Something may have become idle (a turn ended): a waiting `get` looks again now."""
        self._wake()

    async def discard(self, spec: RuntimeSpec) -> None:
        key = pool_key(spec)
        async with self._locks.setdefault(key, anyio.Lock()):
            slot = self._slots.get(key)
            if slot is not None:
                await self._stop(key, slot)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:  # each agent's ladder at once
                for key, slot in list(self._slots.items()):
                    tg.start_soon(self._stop, key, slot)

    async def reap_idle(self, idle_after: float) -> None:
        """Run by the owner: stop each runtime that nobody used for `idle_after` seconds. A
        runtime in use (a turn runs, a start or a `get` is under way) counts as used now."""
        while True:
            await anyio.sleep(min(60.0, idle_after / 2))
            now = time.monotonic()
            for key, slot in list(self._slots.items()):
                if self._slots.get(key) is not slot or slot.runtime is None:
                    continue
                if not self._stoppable(key, slot):
                    slot.last_used = now
                elif now - slot.last_used >= idle_after:
                    log.info(
                        "stopping the idle agent %s pid=%d in %s after %.0f s",
                        slot.runtime.backend.name,
                        slot.runtime.pid,
                        slot.runtime.workspace,
                        now - slot.last_used,
                    )
                    await self._stop(key, slot, told=True)

    def _stoppable(self, key: PoolKey, slot: _Slot) -> bool:
        lock = self._locks.get(key)
        if lock is not None and lock.locked():
            return False  # a `get` for it is under way: it is about to be used
        if slot.runtime is None or not slot.runtime.alive:
            return True
        return self._is_idle(cast(T, slot.value))

    def _victim(self) -> tuple[PoolKey, _Slot] | None:
        """Whom to stop for room: a dead runtime first, else the least recently used idle one."""
        candidates = [
            (key, slot) for key, slot in self._slots.items() if self._stoppable(key, slot)
        ]
        for key, slot in candidates:
            if slot.runtime is None or not slot.runtime.alive:
                return key, slot
        return min(candidates, key=lambda item: item[1].last_used, default=None)

    async def _make_room(self, key: PoolKey) -> None:
        """Reserve one place under the cap (counted in `_starting` until the start ends)."""
        try:
            await self._wait_for_room(key)
        finally:
            self._room_wait.discard(key)
        self._starting += 1

    async def _wait_for_room(self, key: PoolKey) -> None:
        while self._max_live is not None and self.live >= self._max_live:
            victim = self._victim()
            if victim is not None:
                victim_key, slot = victim
                if slot.runtime is not None:
                    log.info(
                        "stopping the least recently used idle agent pid=%d in %s: %d agents "
                        "is the limit",
                        slot.runtime.pid,
                        slot.runtime.workspace,
                        self._max_live,
                    )
                await self._stop(victim_key, slot, told=True)
                continue
            self._room_wait.add(key)
            for waiter in self._queued.get(key, ()):
                waiter.tell(self._tg)
            changed = self._changed
            with anyio.move_on_after(IDLE_RECHECK):
                await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _stop(self, key: PoolKey, slot: _Slot, *, told: bool = False) -> None:
        if self._slots.get(key) is slot:
            del self._slots[key]
        self._stopping += 1
        try:
            if told and self._on_stop is not None and slot.runtime is not None:
                try:
                    self._on_stop(cast(T, slot.value))
                except Exception:  # the caller's bookkeeping must not keep an agent alive
                    log.exception("unexpected fault while dropping a stopped agent's sessions")
            slot.stop.set()
            with anyio.CancelScope(shield=True):  # the ladder is bounded; the count must be true
                await slot.done.wait()
        finally:
            self._stopping -= 1
            self._wake()

    async def _host(
        self,
        spec: RuntimeSpec,
        slot: _Slot,
        *,
        task_status: anyio.abc.TaskStatus[T] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False
        try:
            async with self._opener(spec) as runtime:
                slot.value = await self._prepare(runtime)
                slot.runtime = runtime
                task_status.started(slot.value)
                started = True
                await slot.stop.wait()
        except Exception:
            if not started:  # the caller of `get` gets it: it belongs to that turn
                raise
            # The owner's task group hosts every runtime: a fault in one agent's pipe tasks ends
            # that agent (its turns fail as it being gone; the next `get` starts a new one), not
            # the owner.
            breadcrumbs = slot.runtime.breadcrumbs() if slot.runtime else ""
            log.exception("unexpected fault in a hosted agent; it was stopped [%s]", breadcrumbs)
        finally:
            slot.done.set()
