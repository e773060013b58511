"""An ACP agent that lives in the benchmark's own process: memory pipes, a process stand-in for
`AcpRuntime`, the answers every bench agent gives before its first prompt, and the
`BotApp(..., opener=...)` opener that plugs such an agent in where `open_runtime` would spawn
one."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from acp.runtime import AcpRuntime, RuntimeOpener, RuntimeSpec
    from bot.app import BotApp

PIPE_ITEMS = 64  # writes buffered in a fake pipe before the writer waits (like a full pipe)


class PipeSend(anyio.abc.ByteSendStream):
    def __init__(self, items: MemoryObjectSendStream[bytes]) -> None:
        self._items = items

    async def send(self, item: bytes) -> None:
        await self._items.send(item)

    async def send_eof(self) -> None:
        await self._items.aclose()

    async def aclose(self) -> None:
        await self._items.aclose()


class PipeReceive(anyio.abc.ByteReceiveStream):
    """Like reading a pipe: one receive returns everything buffered, up to max_bytes."""

    def __init__(self, items: MemoryObjectReceiveStream[bytes]) -> None:
        self._items = items
        self._rest = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = self._rest or await self._items.receive()  # EndOfStream once closed and empty
        parts, size = [data], len(data)
        while size < max_bytes:
            try:
                more = self._items.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            parts.append(more)
            size += len(more)
        data = b"".join(parts) if len(parts) > 1 else data
        self._rest = data[max_bytes:]
        return data[:max_bytes]

    async def aclose(self) -> None:
        await self._items.aclose()


def _pipe(items: int = PIPE_ITEMS) -> tuple[PipeSend, PipeReceive]:
    send, receive = anyio.create_memory_object_stream[bytes](items)
    return PipeSend(send), PipeReceive(receive)


class InProcessProcess(anyio.abc.Process):
    """What `AcpRuntime` needs of a process, backed by coroutines. There is no pid: -1 makes any
    stray os.killpg fail with EINVAL instead of reaching a real process group. The agent's ends
    of the pipes are `agent_stdin`, `agent_stdout` and `agent_stderr`; `pipe_items` is how many
    writes each pipe buffers before the writer waits."""

    def __init__(self, stop: Callable[[], None], *, pipe_items: int = PIPE_ITEMS) -> None:
        self._stop = stop
        self._returncode: int | None = None
        self.exited = anyio.Event()
        self.client_stdin, self.agent_stdin = _pipe(pipe_items)
        self.agent_stdout, self.client_stdout = _pipe(pipe_items)
        self.agent_stderr, self.client_stderr = _pipe(pipe_items)

    def set_exited(self, code: int) -> None:
        self._returncode = code
        self.exited.set()

    async def agent_exits(self, code: int = 0) -> None:
        """The agent side is done: its pipe ends close (shielded) and the process has exited."""
        with anyio.CancelScope(shield=True):
            await self.agent_stdout.aclose()
            await self.agent_stderr.aclose()
            await self.agent_stdin.aclose()
        self.set_exited(code)

    async def wait(self) -> int:
        await self.exited.wait()
        assert self._returncode is not None
        return self._returncode

    def terminate(self) -> None:
        self._stop()

    def kill(self) -> None:
        self._stop()

    def send_signal(self, signal: signal.Signals) -> None:
        self._stop()

    @property
    def pid(self) -> int:
        return -1

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def stdin(self) -> anyio.abc.ByteSendStream:
        return self.client_stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream:
        return self.client_stdout

    @property
    def stderr(self) -> anyio.abc.ByteReceiveStream:
        return self.client_stderr

    async def aclose(self) -> None:
        self._stop()
        await self.exited.wait()


def setup_response(
    frame: dict[str, Any], agent_name: str, sessions: Iterator[int]
) -> dict[str, Any] | None:
    """The response to `initialize` or `session/new`, the same for every bench agent (no session
    loading, no authentication, sessions named "s" + the next of `sessions`); None for any other
    frame."""
    method, params = frame.get("method"), frame.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", 1),
            "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": agent_name, "version": "0"},
            "authMethods": [],
        }
    elif method == "session/new":
        result = {"sessionId": f"s{next(sessions)}"}
    else:
        return None
    return {"jsonrpc": "2.0", "id": frame.get("id"), "result": result}


def method_not_found(request_id: Any) -> dict[str, Any]:
    """The error response to a request the bench agent does not serve."""
    error = {"code": -32601, "message": "Method not found"}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


class Agent(Protocol):
    """An agent in coroutines: `run` serves `process`'s pipes until its stdin reaches EOF (or it
    is stopped), then calls `process.set_exited`."""

    @property
    def process(self) -> InProcessProcess: ...

    async def run(self) -> None: ...


def opener_for(make_agent: Callable[[], Agent]) -> RuntimeOpener:
    """An opener for `BotApp(..., opener=...)`: `open_runtime` with the spawn replaced by
    `make_agent()`; the same runtime, handle and tasks."""
    from acp.runtime import AcpRuntime, serve_runtime

    @asynccontextmanager
    async def open_in_process_runtime(spec: RuntimeSpec) -> AsyncIterator[AcpRuntime]:
        agent = make_agent()
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run)
            try:
                # The shutdown ladder closes stdin (the agent exits by itself) and never signals
                # the stand-in's pid -1.
                async with serve_runtime(AcpRuntime(spec, agent.process)) as runtime:
                    yield runtime
            finally:
                tg.cancel_scope.cancel()

    return open_in_process_runtime


@asynccontextmanager
async def engine_app(
    prefix: str,
    surface_name: str,
    conversations: int,
    timeout: float,
    opener: RuntimeOpener,
    **overrides: Any,
) -> AsyncIterator[BotApp]:
    """The real `BotApp` as the engine benchmarks run it: a SQLite store in a temporary
    directory, users `u0`..`u<conversations-1>` allowed on `surface_name`, agents from `opener`;
    the store is closed on the way out."""
    import tempfile
    from pathlib import Path

    from bot.access import AccessPolicy, SurfaceRules
    from bot.app import BotApp
    from bot.store import open_store
    from config import load_settings

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        state = str(Path(tmp) / "state.db")
        settings = load_settings(
            agent="kiro",
            agent_command="kiro-cli acp",  # never spawned: the opener replaces the spawn
            workspace=Path(tmp),
            state=state,
            prompt_timeout=timeout,
            request_timeout=timeout,
            **overrides,
        )
        users = frozenset(f"u{index}" for index in range(conversations))
        access = AccessPolicy({surface_name: SurfaceRules(chat=users)})
        store = open_store(state)
        try:
            yield BotApp(settings, store, access, opener=opener)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()
