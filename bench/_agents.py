"""The in-process ACP agent the chat-surface streaming benches (Telegram, Discord) talk to: each
conversation gets a reply of plain prose, streamed in timed chunks."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from bench._inprocess import (
    PIPE_ITEMS,
    InProcessProcess,
    method_not_found,
    opener_for,
    setup_response,
)

if TYPE_CHECKING:
    from acp.runtime import RuntimeOpener


# ---- the reply each conversation gets ------------------------------------------------------------
def reply_text(conv: int, chars: int) -> str:
    """Plain prose (no Markdown marks, so what people see is what the agent said): paragraphs of
    numbered words, ending in a marker naming the conversation."""
    words: list[str] = []
    size, n = 0, 0
    end = f"END-{conv}."
    while size < chars - len(end) - 1:
        sep = "\n\n" if n and n % 80 == 0 else " "
        words.append((sep if words else "") + f"w{n}")
        size += len(words[-1])
        n += 1
    return "".join(words) + " " + end


def chunks_of(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# ---- an in-process ACP agent ---------------------------------------------------------------------
class StreamingAgent:
    """initialize, session/new, session/prompt (the conversation's reply in timed chunks, then
    end_turn), session/cancel; anything else asked is answered -32601. The prompt names the
    conversation: "conversation 17". `first_chunk[conv]` is when its first chunk went out, by
    `clock`: the fake's clock, which stamps the calls it is compared with."""

    def __init__(
        self,
        chars: int,
        chunk_chars: int,
        gap: float,
        first_chunk: dict[int, float],
        *,
        name: str = "bench-agent",
        first_session: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        pipe_items: int = PIPE_ITEMS,
        tools: int = 0,
    ):
        self.tools = tools  # with progress: a plan, then this many tool calls spread over it
        self.chars = chars
        self.chunk_chars = chunk_chars
        self.gap = gap
        self.first_chunk = first_chunk
        self.name = name
        self.clock = clock
        self.scope = anyio.CancelScope()
        self.process = InProcessProcess(self.scope.cancel, pipe_items=pipe_items)
        self._sessions = itertools.count(first_session)
        self._cancelled: set[str] = set()

    async def _write(self, frame: dict[str, Any]) -> None:
        await self.process.agent_stdout.send(json.dumps(frame).encode() + b"\n")

    async def run(self) -> None:
        try:
            with self.scope:
                async with anyio.create_task_group() as tg:
                    buffer = b""
                    while True:
                        try:
                            data = await self.process.agent_stdin.receive()
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            break
                        *lines, buffer = (buffer + data).split(b"\n")
                        for line in lines:
                            if line.strip():
                                await self._handle(json.loads(line), tg)
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.process.agent_stdout.aclose()
                await self.process.agent_stderr.aclose()
            self.process.set_exited(0)

    async def _handle(self, frame: dict[str, Any], tg: anyio.abc.TaskGroup) -> None:
        method, rid, params = frame.get("method"), frame.get("id"), frame.get("params") or {}
        setup = setup_response(frame, self.name, self._sessions)
        if setup is not None:
            await self._write(setup)
        elif method == "session/prompt":
            tg.start_soon(self._answer, rid, params)
        elif method == "session/cancel":
            self._cancelled.add(params.get("sessionId", ""))
        elif rid is not None and method is not None:
            await self._write(method_not_found(rid))

    async def _answer(self, rid: Any, params: dict[str, Any]) -> None:
        session = params["sessionId"]
        conv = int(params["prompt"][0]["text"].split()[-1])
        clock = self.clock
        start = clock()
        chunks = chunks_of(reply_text(conv, self.chars), self.chunk_chars)
        progress = progress_updates(self.tools, len(chunks))
        for index, chunk in enumerate(chunks):
            delay = start + index * self.gap - clock()
            if delay > 0:
                await anyio.sleep(delay)
            if session in self._cancelled:
                break
            if index == 0:
                self.first_chunk[conv] = clock()
            content = {"type": "text", "text": chunk}
            text_update = {"sessionUpdate": "agent_message_chunk", "content": content}
            updates = [*progress.get(index, ()), text_update]
            for update in updates:
                await self._write(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": session, "update": update},
                    }
                )
        stop = "cancelled" if session in self._cancelled else "end_turn"
        await self._write({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})


def progress_updates(tools: int, chunks: int) -> dict[int, list[dict[str, Any]]]:
    """What a working agent says besides its text, by the chunk it goes before: its plan at the
    start, re-sent as each step is done, and `tools` read calls spread over the reply, each
    completed at the next chunk. Nothing when `tools` is 0."""
    if not tools:
        return {}
    steps = [f"Step {n + 1} of the work" for n in range(4)]
    at: dict[int, list[dict[str, Any]]] = {}

    def plan(done: int) -> dict[str, Any]:
        entries = [
            {
                "content": step,
                "status": "completed" if n < done else "in_progress" if n == done else "pending",
                "priority": "medium",
            }
            for n, step in enumerate(steps)
        ]
        return {"sessionUpdate": "plan", "entries": entries}

    at.setdefault(0, []).append(plan(0))
    for n in range(tools):
        index = (n * chunks) // tools
        call = f"call_{n}"
        at.setdefault(index, []).append(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": call,
                "title": f"Read file {n}",
                "kind": "read",
                "status": "in_progress",
                "rawInput": {"path": f"src/module_{n}.py"},
            }
        )
        at.setdefault(min(index + 1, chunks - 1), []).append(
            {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed"}
        )
        if n % max(1, tools // len(steps)) == 0 and n:
            at[index].append(plan(min(n * len(steps) // tools, len(steps))))
    return at


def agent_opener(
    agent_args: tuple[int, int, float], first_chunk: dict[int, float], **options: Any
) -> RuntimeOpener:
    """An opener for `BotApp(..., opener=...)` whose every runtime is a fresh `StreamingAgent(
    *agent_args, first_chunk, **options)`."""
    return opener_for(lambda: StreamingAgent(*agent_args, first_chunk, **options))
