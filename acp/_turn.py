"""One prompt turn on one session: read its inbox in arrival order and turn frames into events,
until the agent answers `session/prompt` (or dies, or the time runs out).

Backend quirks live here because they decide how a turn ends: kiro's structured refusal and the
bare -32603 that follows it, kiro's "Tool uses were interrupted" idle state, codex failures that
arrive as a `systemError` status plus a text chunk, and claude echoing its error text as a chunk
before the error itself."""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from acp._dispatch import codex_thread_status, kiro_context_percent, parse_refusal, parse_update
from acp.approval_cover import ApprovalCover, ClientAction, TurnApprovals
from acp.backends import ACP_BACKENDS_STRUCTURED_REFUSAL, Backend
from acp.client import AcpError, AcpGateViolation, AcpProcessDied, AcpTimeoutError
from acp.content import PromptContent, prompt_blocks
from acp.growing_text import GrowingText
from acp.session_handle import (
    AcpRequestTimeout,
    AcpRuntimeError,
    InboxItem,
    RpcReply,
    SessionHandle,
    SessionInbox,
)
from acp.types import (
    PERMISSION_ALLOW_ONCE,
    STOP_REASON_CANCELLED,
    STOP_REASON_END_TURN,
    STOP_REASON_REFUSAL,
    AcpEvent,
    AcpPromptStats,
    EventKind,
    PendingPermission,
    RefusalInfo,
    ToolCall,
    UsageInfo,
)
from acp.workspace_files import ClientRequestRefused

log = logging.getLogger(__name__)

KIRO_INTERRUPTED = "Tool uses were interrupted, waiting for the next user prompt"
_RE_INJECTED_WARNING = re.compile(r"\s*Warning: [^\n]{1,500}\n\s*\Z")
_TEXT = EventKind.TEXT
_TOOL_CALL = EventKind.TOOL_CALL
# Events that show the agent is still producing output (unlike usage or title updates, which
# may arrive between an error's echo chunk and the error itself).
_CONTENT = frozenset(
    {
        EventKind.TEXT,
        EventKind.THOUGHT,
        EventKind.TOOL_CALL,
        EventKind.TOOL_UPDATE,
        EventKind.PLAN,
        EventKind.FILE,
    }
)

# Events that stand for session state (the state keeper reads their frames too); a variant
# parse_update skips (config_option_update, current_mode_update) is state as well.
_STATE = frozenset({EventKind.USAGE, EventKind.COMMANDS, EventKind.SESSION_INFO})


def _ignore(method: str, params: Any) -> None:
    return None


def drain_notifications(items: deque[InboxItem], observe: Callable[[str, Any], None]) -> None:
    """Hand the queued notifications nobody will read as a turn's to the state keeper, and
    drop them (each is read once: a notice is said once); other items stay, in order."""
    for _ in range(len(items)):
        item = items.popleft()
        if item[0] == "n":
            observe(item[1], item[2])
        else:
            items.append(item)


ErrorFactory = Callable[[dict[str, Any], str], AcpError]

# How long a timed-out turn waits for the agent to acknowledge its cancel. The person must see the
# partial output and the notice within 2 s of the timeout, so this is short whatever the cancel
# grace (which /stop gets in full: a person who asked to stop can wait for a clean ending).
TIMEOUT_CANCEL_WAIT = 1.0


def _deliver_to(inbox: SessionInbox) -> Callable[[RpcReply | AcpRuntimeError], None]:
    """Route a request's reply into the session's ordered inbox, behind the frames before it."""

    def deliver(reply: RpcReply | AcpRuntimeError) -> None:
        inbox.push(("r", reply) if isinstance(reply, RpcReply) else ("d", reply))

    return deliver


class PromptTurn:
    def __init__(
        self,
        *,
        handle: SessionHandle,
        inbox: SessionInbox,
        session_id: str,
        backend: Backend,
        timeout: float | None,
        cancel_grace: float,
        classify: ErrorFactory,
        looks_like_error: Callable[[str], bool],
        stderr_tail: Callable[[], str],
        claim: Callable[[PromptTurn], None],
        release: Callable[[PromptTurn], None],
        on_text: Callable[[AcpEvent], None] | None = None,
        gated: bool = False,
        agent: str = "",
        observe: Callable[[str, Any], None] | None = None,
        warn: Callable[[str], None] | None = None,
        restore_gate: Callable[[], Awaitable[None]] | None = None,
        cover: ApprovalCover | None = None,
        workspace: Path | None = None,
        on_switch_mode: Callable[[ToolCall], Awaitable[None]] | None = None,
    ) -> None:
        self.handle = handle
        self.inbox = inbox
        self.session_id = session_id
        self.backend = backend
        self.timeout = timeout
        self.cancel_grace = cancel_grace
        self.classify = classify
        self.looks_like_error = looks_like_error
        self.stderr_tail = stderr_tail
        # The session's bookkeeping around the turn, called as it starts (may refuse it: one
        # turn per session) and once it has ended, however it ended.
        self.claim = claim
        self.release = release
        # Given: TEXT events go to it, synchronously and in order, instead of out of `run` (see
        # `take_text`). It must not block; what it raises ends the turn.
        self.on_text = on_text
        # The gate holds (see acp/tool_gate.py): a tool run with no person's approval is a
        # violation (acp/approval_cover.py says which); `agent` names the agent in it.
        self.gated = gated
        self.agent = agent
        # Every tool call of the turn, merged from its updates, and which a person allowed.
        self.approvals = TurnApprovals(cover or ApprovalCover(), workspace)
        # The mode/option watcher's hook: a `switch_mode` tool call completed, the agent may
        # have left its asking mode; awaited before anything else of the turn is read.
        self.on_switch_mode = on_switch_mode
        # The session's state keeper: handed every notification that may be state (not text).
        self.observe = observe or _ignore
        # Given: warnings the agent injects into its reply stream go here as notices; they are
        # not the answer (nor activity, for the retry ladder).
        self.warn = warn
        # The session's approval state put back (returns at once when it is in place): awaited
        # before the prompt and after each state frame, so no tool follows a switch unrestored.
        self.restore_gate = restore_gate
        self._echoes_errors = backend.name == "claude"
        self._echo: AcpEvent | None = None  # a chunk that may be the echo of the error to come
        self.text = GrowingText()  # what the agent wrote in this turn
        self.tool_calls = 0
        self.files = 0  # files in the reply (delivered as they come: a resend would repeat them)
        self.refusal: RefusalInfo | None = None
        self.cancel_sent = False
        self.answered_cancelled = False
        # The agent did not answer the cancel within its grace: it is hung and must be stopped.
        self.cancel_ignored = False
        self.pending: list[PendingPermission] = []
        self._system_error = False
        self._held: list[AcpEvent] = []
        self._request_id: int | None = None
        self._grace_deadline: float | None = None
        self._message_id: str | None = None  # of the latest text chunk
        self._timer: int | None = None

    @property
    def partial_output(self) -> str:
        return str(self.text)

    @property
    def activity(self) -> bool:
        """Whether the agent visibly acted on the prompt (so resending it is unsafe)."""
        return self.tool_calls > 0 or self.files > 0 or self.text.visible

    # ---- control ----------------------------------------------------------------------------
    async def cancel(self, *, grace: float | None = None) -> None:
        """session/cancel once, then answer every pending permission `cancelled` (ACP rule).
        The turn then waits at most `grace` (default: the cancel grace) for the agent's answer."""
        wait = self.cancel_grace if grace is None else grace
        limit = time.monotonic() + wait
        if self._grace_deadline is None or limit < self._grace_deadline:
            self._grace_deadline = limit
            self._arm(limit)
        if not self.cancel_sent:
            self.cancel_sent = True
            try:
                await self.handle.notify("session/cancel", {"sessionId": self.session_id})
            except AcpRuntimeError:
                log.debug("cancel not sent: the agent is gone")
        for pending in self.pending:
            if not pending.answered:
                self.answered_cancelled = True
                pending.respond(None)

    async def ask_permission(self, pending: PendingPermission) -> str | None:
        """The agent's request, shown as the turn's next event; the person's answer noted."""
        answer = await self._ask(pending)
        self.approvals.answered(pending, answer)
        return answer

    async def authorize(self, action: ClientAction) -> None:
        """Run `action` (a write or a command the agent asked of us) only under an approval:
        one that covers it, else the person's answer to Switchboard's own card; otherwise
        ClientRequestRefused, which the agent gets as its request's error."""
        covering = self.approvals.covering(action)
        if covering is not None:
            log.info("%s covered by the approval of %s", action.method, covering)
            return
        log.warning(
            "%s asked for %s with no approval covering it: asking the person",
            self.agent or self.backend.label,
            action.tool.describe(),
        )
        pending = action.unasked_request(self.session_id)
        try:
            answer = await self._ask(pending)
        finally:
            if not pending.answered:
                pending.withdraw()
        allow = pending.request.option_of_kind(PERMISSION_ALLOW_ONCE)
        if answer is None or allow is None or answer != allow.option_id:
            why = "the person declined it"
            if answer is None:
                why = "the turn ended before anyone allowed it"
            raise ClientRequestRefused(action.method, why)
        self.approvals.allowed_unasked(action)

    async def _ask(self, pending: PendingPermission) -> str | None:
        if self.cancel_sent:
            return None
        self.pending.append(pending)
        self.inbox.push(("p", pending))
        answer = await pending.wait()
        if answer is None:
            self.answered_cancelled = True
        return answer

    def _arm(self, when: float) -> None:
        """Wake the turn at `when` (one timer: the earliest limit that matters)."""
        if self._timer is not None:
            self.handle.cancel_timer(self._timer)
        inbox = self.inbox
        self._timer = self.handle.call_at(when, lambda: inbox.push(("t",)))

    # ---- the turn ---------------------------------------------------------------------------
    async def run(self, prompt: PromptContent) -> AsyncIterator[AcpEvent]:
        """The turn's events, from sending the prompt to one TERMINAL event (or an error).

        Each streamed chunk passes through here, so the loop drains every item that has arrived
        before waiting again (one wake-up per burst), and the session's own bookkeeping is the
        `claim`/`release` hooks rather than another async-generator layer around this one."""
        self.claim(self)
        inbox = self.inbox
        items = inbox.items
        timed_out = False
        structured = self.backend.name in ACP_BACKENDS_STRUCTURED_REFUSAL
        on_text = self.on_text
        observe = self.observe
        between_turns = inbox.take_now  # the session's, put back when the turn ends
        try:
            drain_notifications(items, observe)
            items.clear()  # leftovers of an earlier turn (e.g. a late stop reason)
            inbox.take_now = self.take_text if on_text is not None else None
            if self.restore_gate is not None:
                await self.restore_gate()
            params = {"sessionId": self.session_id, "prompt": prompt_blocks(prompt)}
            self._request_id = await self.handle.send_request(
                "session/prompt", params, _deliver_to(inbox)
            )
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            if deadline is not None:
                self._arm(deadline)
            while True:
                if not items:
                    await inbox.wait()
                item = items.popleft()
                tag = item[0]
                if tag == "n":  # the common case first: a chunk
                    method = item[1]
                    if method == "session/update":
                        event = parse_update(item[2])
                        if event is None or event.kind in _STATE:
                            observe(method, item[2])
                            if self.restore_gate is not None:
                                await self.restore_gate()
                    else:
                        observe(method, item[2])
                        event = self._on_notification(method, item[2], structured)
                    if event is None:
                        continue
                    kind = event.kind
                    if kind is _TEXT and event.message_id != self._message_id:
                        event = self._separated(event)
                    if self.approvals.suspects and kind in _CONTENT:
                        await self._judge(event.tool.tool_call_id if event.tool else None)
                    if self._echo is not None and kind in _CONTENT:
                        # more content follows: the held chunk was output, not an echo
                        for echo in self._echo_was_output():
                            yield echo
                    if kind is _TEXT:
                        if self._system_error:
                            self._held.append(event)
                            continue
                        chunk = event.text  # `in` first: it allocates nothing, unlike strip()
                        if KIRO_INTERRUPTED in chunk and chunk.strip() == KIRO_INTERRUPTED:
                            yield self._terminal(STOP_REASON_END_TURN, None, interrupted=True)
                            return
                        if self._echoes_errors and self.looks_like_error(chunk):
                            self._echo = event
                            continue
                        if self.warn is not None and self._injected_warning(chunk):
                            self.warn(" ".join(chunk.split()))  # a notice, not the answer
                            continue
                        self.text.append(chunk)
                        if on_text is not None:
                            on_text(event)
                            continue
                    elif kind is _TOOL_CALL or kind is EventKind.TOOL_UPDATE:
                        if kind is _TOOL_CALL:
                            self.tool_calls += 1
                        if event.tool is not None:
                            tool = self.approvals.known(event.tool)
                            event = replace(event, tool=tool)
                            await self._check_tool(tool)
                    elif kind is EventKind.FILE:
                        self.files += 1
                    elif kind is EventKind.SESSION_INFO and event.raw is not None:
                        status = codex_thread_status(event.raw)
                        if status == "systemError":
                            self._system_error = True
                        elif status == "active" and self._system_error:
                            self._system_error = False  # it recovered: the text was output
                            for held_event in self._release_held():
                                yield held_event
                    yield event
                elif tag == "x":  # what `on_text` raised on the reader's stack
                    raise item[1]
                elif tag == "p":
                    for echo in self._echo_was_output():  # a permission: the echo was output
                        yield echo
                    asked: PendingPermission = item[1]
                    await self._judge(asked.request.tool.tool_call_id, unasked=asked.unasked)
                    started = time.monotonic()
                    self.approvals.detail(asked)
                    yield AcpEvent(EventKind.PERMISSION, permission=item[1])
                    if deadline is not None:  # time spent with a person is not agent time
                        deadline += time.monotonic() - started
                elif tag == "r":
                    reply: RpcReply = item[1]
                    if timed_out:
                        raise AcpTimeoutError(self.timeout or 0.0, self.partial_output)
                    await self._judge()
                    if reply.error is None:
                        for echo in self._echo_was_output():
                            yield echo
                        result = reply.result if isinstance(reply.result, dict) else {}
                        self._raise_codex_failure(result)
                        for held_event in self._release_held():
                            yield held_event
                        yield self._stats_event(result)
                        return
                    if self.refusal is not None and not reply.error.get("data"):
                        # kiro ends a refusal with a bare -32603: that is the refusal's end
                        yield self._terminal(STOP_REASON_REFUSAL, None)
                        return
                    raise self.classify(reply.error, self.partial_output)
                elif tag == "d":
                    self._echo = None  # the process died: an error-looking chunk was its last words
                    if timed_out:
                        raise AcpTimeoutError(self.timeout or 0.0, self.partial_output)
                    cause: AcpRuntimeError = item[1]
                    raise AcpProcessDied(
                        getattr(cause, "returncode", None),
                        ambiguous_delivery=self.activity,
                        stderr_tail=self.stderr_tail(),
                        partial_output=self.partial_output,
                    ) from cause
                elif tag == "c":  # a terminal of this session ran or printed (TerminalHost)
                    yield AcpEvent(EventKind.TERMINAL_ACTIVITY, terminal=item[1])
                elif tag == "t":  # a timer: the deadline or the cancel grace
                    now = time.monotonic()
                    if self._grace_deadline is not None and now >= self._grace_deadline:
                        self.cancel_ignored = True
                        break
                    if deadline is not None and not timed_out and now >= deadline:
                        timed_out = True
                        await self.cancel(grace=min(self.cancel_grace, TIMEOUT_CANCEL_WAIT))
                        continue
                    limits = [deadline] if deadline is not None and not timed_out else []
                    if self._grace_deadline is not None:
                        limits.append(self._grace_deadline)
                    if limits:  # moved on (time spent with a person)
                        self._arm(min(limits))
            if timed_out:
                raise AcpTimeoutError(self.timeout or 0.0, self.partial_output)
            yield self._terminal(STOP_REASON_CANCELLED, None)
        finally:
            inbox.take_now = between_turns
            drain_notifications(items, observe)  # what came after the answer is state
            if self._timer is not None:
                self.handle.cancel_timer(self._timer)
                self._timer = None
            if self._request_id is not None:
                self.handle.forget(self._request_id)
            for pending in self.pending:
                if not pending.answered:
                    pending.respond(None)
            self.release(self)

    # ---- tool calls and the gate ---------------------------------------------------------------
    async def _judge(self, next_tool: str | None = None, *, unasked: bool = False) -> None:
        suspect = self.approvals.judge(next_tool, unasked) if self.gated else None
        if suspect is not None:
            await self._stop_for_violation(suspect)

    async def _check_tool(self, tool: ToolCall) -> None:
        if self.gated and self.approvals.violates(tool):
            await self._stop_for_violation(tool)
        if tool.kind == "switch_mode" and tool.status == "completed" and self.on_switch_mode:
            await self.on_switch_mode(tool)

    async def _stop_for_violation(self, tool: ToolCall) -> None:
        log.error(
            "tool gate violation: %s ran %s tool %s (id %s, %s) with no approval",
            self.agent or self.backend.label,
            tool.kind or "a kindless",
            tool.describe(),
            tool.tool_call_id,
            tool.status,
        )
        await self.cancel()
        raise AcpGateViolation(
            self.agent or self.backend.label, tool.describe(), self.partial_output
        )

    def _on_notification(self, method: str, params: Any, structured: bool) -> AcpEvent | None:
        """The event a notification other than `session/update` stands for, if any."""
        if structured and method == "_kiro.dev/metadata" and isinstance(params, dict):
            refusal = parse_refusal(params)
            if refusal is not None:
                self.refusal = refusal
                return AcpEvent(EventKind.REFUSAL, refusal=refusal, raw=params)
            percent = kiro_context_percent(params)
            if percent is not None:
                return AcpEvent(EventKind.USAGE, usage=UsageInfo(percent=percent), raw=params)
        return None

    def _separated(self, event: AcpEvent) -> AcpEvent:
        """A new agent message (another messageId, e.g. claude's informational notice) starts a
        new paragraph: run together, two messages would read as one sentence."""
        previous, self._message_id = self._message_id, event.message_id or self._message_id
        if previous is None or event.message_id in (None, previous) or not self.text:
            return event
        tail = self.text.tail(2)
        gap = "" if tail == "\n\n" else "\n" if tail.endswith("\n") else "\n\n"
        return replace(event, text=gap + event.text.lstrip("\n"))

    def take_text(self, method: str, params: Any) -> bool:
        """The inbox's `take_now`: an ordinary text chunk, with nothing queued ahead of it, goes
        to `on_text` here on the reader's stack, as `run` would have sent it, but without a task
        switch and a pass through the generators above `run`. Anything that needs `run`'s state
        machine (other updates, a chunk to hold back, the kiro idle line) is left queued."""
        if method != "session/update" or self._system_error or self._echo is not None:
            return False
        if self.approvals.suspects:  # a chunk now judges them: `run` does
            return False
        update = params.get("update") if type(params) is dict else None
        if type(update) is not dict or update.get("sessionUpdate") != "agent_message_chunk":
            return False
        event = parse_update(params)
        if event is None or event.kind is not _TEXT:
            return False
        if self._for_run(event.text):
            return False
        if event.message_id != self._message_id:
            event = self._separated(event)
        self.text.append(event.text)
        assert self.on_text is not None  # set whenever the inbox has this taker
        try:
            self.on_text(event)
        except Exception as exc:  # the reader serves every session: the turn raises it instead
            self.inbox.push(("x", exc))
        return True

    def _for_run(self, chunk: str) -> bool:
        """A chunk only `run` may decide about: kiro's idle line, a possible echo of the error
        to come, a warning to tell as a notice (checked cheaply: `in` allocates nothing)."""
        return (
            KIRO_INTERRUPTED in chunk
            or (self._echoes_errors and self.looks_like_error(chunk))
            or ("arning" in chunk and self.warn is not None and self._injected_warning(chunk))
        )

    def _injected_warning(self, chunk: str) -> bool:
        """A warning the agent put into its reply stream (codex: "Warning: Model metadata for
        `m` not found. ..."): one whole `Warning: ...` line, as a chunk of its own, at the start
        of a line. Streamed answers arrive in pieces, so an answer that begins with the word is
        not one."""
        if not _RE_INJECTED_WARNING.match(chunk):
            return False
        return not self.text or self.text.tail(1) == "\n"

    def _echo_was_output(self) -> list[AcpEvent]:
        """The held chunk, now known to be output rather than an error's echo: counted, and
        sent to `on_text` or returned to be yielded."""
        echo, self._echo = self._echo, None
        if echo is None:
            return []
        self.text.append(echo.text)
        if self.on_text is not None:
            self.on_text(echo)
            return []
        return [echo]

    def _release_held(self) -> list[AcpEvent]:
        held, self._held = self._held, []
        for event in held:
            self.text.append(event.text)
        if self.on_text is not None:
            for event in held:
                self.on_text(event)
            return []
        return held

    def _raise_codex_failure(self, result: dict[str, Any]) -> None:
        """codex: after a systemError status, the text chunk is the failure itself when the turn
        ends with `usage: null`."""
        if self._system_error and self._held and "usage" in result and result["usage"] is None:
            message = "".join(event.text for event in self._held).strip()
            self._held = []
            raise self.classify(
                {"code": -32603, "message": "Internal error", "data": message},
                self.partial_output,
            )

    def _stats_event(self, result: dict[str, Any]) -> AcpEvent:
        stop_reason = result.get("stopReason")
        if not isinstance(stop_reason, str) or not stop_reason:
            stop_reason = STOP_REASON_END_TURN
        if stop_reason == STOP_REASON_REFUSAL and self.refusal is None:
            if self.answered_cancelled or self.cancel_sent:
                # kiro reports a turn we cancelled (or whose tool we answered `cancelled`) as
                # a refusal: that was us, not the model
                stop_reason = STOP_REASON_CANCELLED
            else:
                self.refusal = RefusalInfo()
        usage = result.get("usage")
        return self._terminal(stop_reason, usage if isinstance(usage, dict) else None)

    def _terminal(
        self, stop_reason: str, usage: dict[str, Any] | None, *, interrupted: bool = False
    ) -> AcpEvent:
        stats = AcpPromptStats(
            stop_reason=stop_reason,
            usage=usage,
            refusal=self.refusal,
            text_chars=len(self.text),
            tool_calls=self.tool_calls,
            interrupted=interrupted,
        ).terminal_refusal()
        return AcpEvent(EventKind.TERMINAL, stats=stats)

    # ---- session/load ------------------------------------------------------------------------
    @staticmethod
    async def load(
        handle: SessionHandle,
        session_id: str,
        params: dict[str, Any],
        *,
        idle_timeout: float,
        hard_timeout: float,
        observe: Callable[[str, Any], None] | None = None,
    ) -> RpcReply:
        """Send session/load and swallow the replayed history. Each replayed frame extends the
        deadline (a long history is slow, not stuck), up to a hard cap; an unknown id may hang."""
        inbox = handle.open_inbox(session_id)
        inbox.items.clear()
        request_id = await handle.send_request("session/load", params, _deliver_to(inbox))
        hard_deadline = time.monotonic() + hard_timeout
        try:
            while True:
                limit = min(time.monotonic() + idle_timeout, hard_deadline)
                with anyio.move_on_after(max(0.0, limit - time.monotonic())):
                    await inbox.wait()
                if not inbox.items:
                    capped = time.monotonic() >= hard_deadline
                    raise AcpRequestTimeout(
                        "session/load", hard_timeout if capped else idle_timeout
                    )
                while inbox.items:
                    item = inbox.items.popleft()
                    if item[0] == "n" and observe is not None:
                        observe(item[1], item[2])  # replayed history is not state; the rest is
                    elif item[0] == "r":
                        reply: RpcReply = item[1]
                        return reply
                    if item[0] == "d":
                        raise item[1]
        finally:
            handle.forget(request_id)
            if observe is not None:  # read in the same chunk as the answer: after the replay
                drain_notifications(inbox.items, observe)
            inbox.items.clear()
