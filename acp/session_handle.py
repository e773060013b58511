"""The JSON-RPC 2.0 connection over one agent process's stdio, one JSON object per line.

Ids are ours per direction. Replies resolve pending requests; notifications carrying a sessionId
go, in arrival order, to that session's inbox (`acp.inbox`; a subagent's updates to its parent's,
`SubagentRoutes`), the others to whoever `listen`s; requests from the agent go to the one handler
`serve_requests` names, answered concurrently (a permission request waits on a person), and
anything we do not implement gets -32601.
Non-JSON lines, non-object JSON values and over-long lines are skipped, never fatal.

Errors of this layer::

    AcpRuntimeError                     the agent process or its pipe failed
    ├── AcpRuntimeDead                  the process is gone; every pending request fails with it
    ├── AcpRequestTimeout               a request ran out of its time budget
    ├── AcpSpawnFailed                  (runtime.py) the agent could not be started at all
    └── AcpWorkspaceBindingError        (runtime.py) a session asked for another workspace
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.abc

from acp._dispatch import redact, redact_links
from acp._frame_parsing import parse_line
from acp.agent_reports import SubagentRoutes
from config import valid_text

log = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_READ_SIZE = 256 * 1024
_LOGGED_LINE_CHARS = 500
# Read past the cut before redacting, so a credential the cut would split is still recognised.
_REDACTION_MARGIN = 256

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800


# Cancelled timers are swept from the heap once there are this many and they are most of it.
_COMPACT_TIMERS_AT = 64


class AcpRuntimeError(Exception):
    """Root of the process/transport failures."""


# What to do about an agent that died or went quiet; the runtime logs its stderr tail at WARNING.
NEXT_STEP = (
    "Check its command with `switchboard doctor`; the agent's last stderr lines are in "
    "Switchboard's log."
)


class AcpRuntimeDead(AcpRuntimeError):
    def __init__(self, returncode: int | None = None, stderr_tail: str = "") -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        status = "" if returncode is None else f" (exit code {returncode})"
        last = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
        said = f"; its last words: {redact_links(last[0][:300])}" if last else ""
        super().__init__(f"The agent process stopped unexpectedly{status}{said}. {NEXT_STEP}")


class AcpRequestTimeout(AcpRuntimeError):
    def __init__(self, method: str, timeout: float) -> None:
        self.method = method
        self.timeout = timeout
        super().__init__(f"The agent did not answer {method} within {timeout:g} s. {NEXT_STEP}")


@dataclass(slots=True)
class RpcReply:
    """A response frame: exactly one of result / error is meaningful."""

    result: Any = None
    error: dict[str, Any] | None = None


ReplySink = Callable[["RpcReply | AcpRuntimeError"], None]
RequestHandler = Callable[[str, Any], Awaitable[RpcReply]]
NotificationHandler = Callable[[str, Any], None]


class SessionSink(Protocol):
    """Where one session's notifications go, in arrival order (`acp.inbox.SessionInbox`)."""

    def push_notification(self, method: str, params: Any) -> None: ...

    def agent_gone(self, cause: AcpRuntimeError) -> None: ...


class _Waiter:
    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: RpcReply | AcpRuntimeError | None = None

    def __call__(self, value: RpcReply | AcpRuntimeError) -> None:
        self.value = value
        self.event.set()


def _log_frame(direction: str, label: str, line: bytes) -> None:
    """One debug line per frame: what went over the wire, truncated and redacted."""
    head = line[: _LOGGED_LINE_CHARS + _REDACTION_MARGIN].decode("utf-8", "replace")
    body = redact(head)[:_LOGGED_LINE_CHARS]
    more = f" … ({len(line)} bytes)" if len(line) > _LOGGED_LINE_CHARS else ""
    log.debug("%s %s %s%s", direction, label, body.rstrip("\n"), more)


def _frame_label(message: dict[str, Any]) -> str:
    """`session/prompt#3` for a request, `session/update` for a notification, `reply#3`."""
    method = message.get("method")
    if method is None:
        return f"reply#{message.get('id')}"
    return f"{method}#{message['id']}" if "id" in message else str(method)


async def _no_handler(method: str, params: Any) -> RpcReply:
    return RpcReply(error={"code": METHOD_NOT_FOUND, "message": "Method not found"})


class SessionHandle:
    def __init__(
        self,
        send: anyio.abc.ByteSendStream,
        receive: anyio.abc.ByteReceiveStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        death_cause: Callable[[], Awaitable[AcpRuntimeDead]] | None = None,
    ) -> None:
        self._send = send
        self._receive = receive
        self._max_line = max_line_bytes
        self._death_cause = death_cause
        self._write_lock = anyio.Lock()
        self._next_id = 0
        self._pending: dict[int, ReplySink] = {}
        self._inboxes: dict[str, SessionSink] = {}
        self._running: dict[Any, anyio.CancelScope] = {}
        self._tg: anyio.abc.TaskGroup | None = None  # while served: sends `$/cancel_request`
        self.dead: AcpRuntimeError | None = None
        # the methods of the last frames, for crash reports
        self.recent_frames: deque[str] = deque(maxlen=16)
        # Deadlines of waiting turns, served by one task: a timeout scope per awaited frame
        # would cost more than the frame itself.
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = itertools.count()
        self._cancelled_timers: set[int] = set()
        self._timers_changed = anyio.Event()
        self._on_request: RequestHandler = _no_handler
        self._listeners: list[NotificationHandler] = []
        self.subagents = SubagentRoutes()  # whose child each subagent session is

    @property
    def awaiting(self) -> bool:
        """A request either way is unanswered (ours to the agent, or the agent's to us)."""
        return bool(self._pending or self._running)

    # ---- who is told what -------------------------------------------------------------------
    def serve_requests(self, handler: RequestHandler) -> None:
        """`handler` answers the agent's requests from now on (until one is given, each is
        answered -32601)."""
        self._on_request = handler

    def listen(self, handler: NotificationHandler) -> None:
        """Tell `handler` too, in order of listening, each notification no session takes."""
        self._listeners.append(handler)

    def open_inbox(self, session_id: str, sink: SessionSink) -> None:
        """Route the session's notifications to `sink` (told at once if the agent is gone)."""
        self._inboxes[session_id] = sink
        if self.dead is not None:
            sink.agent_gone(self.dead)

    def inbox_of(self, session_id: str) -> SessionSink | None:
        return self._inboxes.get(session_id)

    def close_inbox(self, session_id: str) -> None:
        self._inboxes.pop(session_id, None)

    # ---- outgoing -------------------------------------------------------------------------
    async def _write(self, frame: dict[str, Any]) -> None:
        if self.dead is not None:
            raise self.dead
        text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        try:
            line = text.encode() + b"\n"
        except UnicodeEncodeError:  # a lone surrogate got past the edges: no frame may raise
            line = valid_text(text).encode() + b"\n"
        method = frame.get("method")
        self.recent_frames.append(
            f"-> {method}" if method is not None else f"-> reply#{frame.get('id')}"
        )
        if log.isEnabledFor(logging.DEBUG):
            _log_frame("->", _frame_label(frame), line)
        try:
            async with self._write_lock:
                await self._send.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise self.dead or AcpRuntimeDead() from exc

    async def send_request(self, method: str, params: Any, on_reply: ReplySink) -> int:
        """Send a request whose reply (or death) is handed to `on_reply`; returns its id."""
        request_id = self._next_id
        self._next_id += 1
        self._pending[request_id] = on_reply
        try:
            await self._write(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
        except BaseException:
            self._pending.pop(request_id, None)
            raise
        return request_id

    def forget(self, request_id: int) -> None:
        """Stop waiting for a reply; a late one is dropped. One still unanswered is cancelled
        on the agent's side too (`$/cancel_request`, sent soon), so it can stop working on it."""
        if self._pending.pop(request_id, None) is not None and self._tg is not None:
            self._tg.start_soon(self.cancel_request, request_id)

    async def cancel_request(self, request_id: int) -> None:
        """Tell the agent we no longer wait for our request `request_id` (ACP's
        `$/cancel_request`; an agent that does not know it ignores the notification)."""
        if self.dead is not None:
            return
        try:
            await self.notify("$/cancel_request", {"requestId": request_id})
        except AcpRuntimeError:
            log.debug("could not cancel request %s: the agent is gone", request_id)

    async def call(self, method: str, params: Any, *, timeout: float) -> RpcReply:
        waiter = _Waiter()
        request_id = await self.send_request(method, params, waiter)
        try:
            with anyio.fail_after(timeout):
                await waiter.event.wait()
        except TimeoutError:
            if self._pending.pop(request_id, None) is not None:
                await self.cancel_request(request_id)  # before the caller hears of it
            raise AcpRequestTimeout(method, timeout) from None
        if isinstance(waiter.value, AcpRuntimeError):
            raise waiter.value
        assert waiter.value is not None
        return waiter.value

    async def notify(self, method: str, params: Any) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    # ---- timers ---------------------------------------------------------------------------
    def call_at(self, when: float, callback: Callable[[], None]) -> int:
        """Run `callback` at `when` (time.monotonic) while the connection is served."""
        timer_id = next(self._timer_ids)
        heapq.heappush(self._timers, (when, timer_id, callback))
        if self._timers[0][1] == timer_id:
            self._timers_changed.set()
        return timer_id

    def cancel_timer(self, timer_id: int) -> None:
        self._cancelled_timers.add(timer_id)
        # A cancelled timer stays in the heap until its time (a turn's is its prompt timeout,
        # minutes away), holding what its callback holds (the turn's inbox). Once most of the
        # heap is cancelled, rebuild it without them: memory follows the live timers, and the
        # rebuild costs about one heap operation per cancellation.
        cancelled = self._cancelled_timers
        if len(cancelled) >= _COMPACT_TIMERS_AT and 2 * len(cancelled) >= len(self._timers):
            self._timers[:] = [timer for timer in self._timers if timer[1] not in cancelled]
            heapq.heapify(self._timers)
            cancelled.clear()  # ids of timers that already ran go too: they never come back

    async def _run_timers(self) -> None:
        while True:
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, timer_id, callback = heapq.heappop(self._timers)
                if timer_id in self._cancelled_timers:
                    self._cancelled_timers.discard(timer_id)
                else:
                    callback()
            changed = self._timers_changed = anyio.Event()
            if self._timers:
                with anyio.move_on_after(self._timers[0][0] - now):
                    await changed.wait()
            else:
                await changed.wait()

    # ---- incoming -------------------------------------------------------------------------
    async def serve(self) -> None:
        """Read until the agent's stdout closes, then fail everything still waiting."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._run_timers)
                await self._read_loop(tg)
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                cause = await self._death_cause() if self._death_cause else AcpRuntimeDead()
            self._fail_all(cause)

    async def _read_loop(self, tg: anyio.abc.TaskGroup) -> None:
        pieces: list[bytes] = []
        pending_size = 0
        discarding = False
        while True:
            try:
                chunk = await self._receive.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            if discarding:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk = chunk[newline + 1 :]
                discarding = False
            last_newline = chunk.rfind(b"\n")
            if last_newline < 0:
                pieces.append(chunk)
                pending_size += len(chunk)
                if pending_size > self._max_line:
                    log.warning("dropping a line over %d bytes from the agent", self._max_line)
                    pieces.clear()
                    pending_size = 0
                    discarding = True
                continue
            head = chunk[:last_newline]
            data = b"".join((*pieces, head)) if pieces else head
            rest = chunk[last_newline + 1 :]
            pieces = [rest] if rest else []
            pending_size = len(rest)
            # Asked once per read rather than once per frame: a read holds thousands of frames.
            debug = log.isEnabledFor(logging.DEBUG)
            dispatch = self._dispatch_line
            for line in data.split(b"\n"):
                dispatch(line, tg, debug)

    def _dispatch_line(self, line: bytes, tg: anyio.abc.TaskGroup, debug: bool) -> None:
        if len(line) > self._max_line:
            log.warning("dropping a line of %d bytes from the agent", len(line))
            return
        try:
            message = parse_line(line)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
            if line.strip():
                log.debug("skipping non-JSON line from agent: %r", line[:_LOGGED_LINE_CHARS])
            return
        if type(message) is not dict:
            log.debug("skipping non-object JSON from agent: %r", line[:_LOGGED_LINE_CHARS])
            return
        method = message.get("method")
        if debug:
            _log_frame("<-", _frame_label(message), line)
        if method is None:
            if "id" in message:
                self.recent_frames.append(f"<- reply#{message['id']}")
                self._on_reply(message)
            else:
                log.debug("skipping frame without method or id: %r", line[:_LOGGED_LINE_CHARS])
            return
        self.recent_frames.append(f"<- {method}")
        params = message.get("params")
        if "id" in message:
            # The scope exists before the task runs, so a `$/cancel_request` read in the same
            # chunk still finds it.
            scope = anyio.CancelScope()
            if isinstance(message["id"], str | int):
                self._running[message["id"]] = scope
            tg.start_soon(self._answer, message["id"], method, params, scope)
            return
        if method == "$/cancel_request":
            # The agent withdrew one of its requests we are still answering (a permission card,
            # a running client method): its task stops and answers -32800. Never a session's,
            # whatever else the params carry.
            request_id = params.get("requestId") if type(params) is dict else None
            running = self._running.get(request_id) if isinstance(request_id, str | int) else None
            if running is not None:
                running.cancel()
            return
        session_id = params.get("sessionId") if type(params) is dict else None
        inbox = self._inboxes.get(session_id) if type(session_id) is str else None
        if inbox is not None:
            if b"subagent_update" in line:  # the name first: no streamed chunk pays for it
                self.subagents.announced(session_id, params)
            inbox.push_notification(method, params)
        elif (routed := self.subagents.route(method, params)) and routed[0] in self._inboxes:
            self._inboxes[routed[0]].push_notification(method, routed[1])  # to its parent
        else:
            for listener in self._listeners:
                listener(method, params)

    def _on_reply(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        sink = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if sink is None:
            log.debug("dropping reply to unknown or abandoned request %r", request_id)
            return
        error = message.get("error")
        if error is not None:
            if not isinstance(error, dict):
                error = {"code": INTERNAL_ERROR, "message": str(error)}
            sink(RpcReply(error=error))
        else:
            sink(RpcReply(result=message.get("result")))

    async def _answer(
        self, request_id: Any, method: str, params: Any, scope: anyio.CancelScope
    ) -> None:
        reply = RpcReply(error={"code": REQUEST_CANCELLED, "message": "Request cancelled"})
        with scope:
            try:
                reply = await self._on_request(method, params)
            except Exception:
                log.exception("answering agent request %s failed", method)
                reply = RpcReply(error={"code": INTERNAL_ERROR, "message": "Internal error"})
            finally:
                if isinstance(request_id, str | int):
                    self._running.pop(request_id, None)
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if reply.error is not None:
            frame["error"] = reply.error
        else:
            frame["result"] = reply.result
        try:
            await self._write(frame)
        except AcpRuntimeError:
            log.debug("could not answer %s: the agent is gone", method)

    def _fail_all(self, cause: AcpRuntimeError) -> None:
        self.dead = cause
        pending, self._pending = self._pending, {}
        for sink in pending.values():
            sink(cause)
        for inbox in self._inboxes.values():
            inbox.agent_gone(cause)
