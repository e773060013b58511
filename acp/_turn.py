"""One prompt turn on one session: read its inbox in arrival order and turn frames into events,
until the agent answers `session/prompt` (or dies, or the time runs out).

How a backend's turn may end otherwise (a refusal, an idle line, a failure told as text, an
error echoed before it arrives) is its quirks' to say (acp/quirks.py); the turn consults them."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from acp._dispatch import parse_update
from acp.approval_cover import ClientAction, TurnApprovals
from acp.client import AcpGateViolation, AcpProcessDied, AcpTimeoutError
from acp.content import PromptContent, prompt_blocks
from acp.elicitation import ElicitationAnswer, PendingElicitation
from acp.growing_text import GrowingText
from acp.inbox import (
    WAKE,
    AgentGone,
    Answered,
    ElicitationAsked,
    PermissionAsked,
    TerminalRan,
    TextTakerFailed,
    Wake,
    drain_notifications,
)
from acp.quirks import Take, injected_warning
from acp.session_handle import AcpRuntimeError, RpcReply
from acp.turn_asks import TurnAsks
from acp.turn_clock import TurnClock
from acp.turn_setup import SessionLine, TurnAgent, TurnHooks
from acp.types import (
    STOP_REASON_CANCELLED,
    STOP_REASON_END_TURN,
    STOP_REASON_REFUSAL,
    AcpEvent,
    AcpPromptStats,
    EventKind,
    PendingPermission,
    RefusalInfo,
    TerminalActivity,
    ToolCall,
)

log = logging.getLogger(__name__)

_TEXT = EventKind.TEXT
_TOOL_CALL = EventKind.TOOL_CALL
_OUTPUT = Take.OUTPUT
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

# How long a timed-out turn waits for the agent to acknowledge its cancel. The person must see the
# partial output and the notice within 2 s of the timeout, so this is short whatever the cancel
# grace (which /stop gets in full: a person who asked to stop can wait for a clean ending).
TIMEOUT_CANCEL_WAIT = 1.0


class PromptTurn:
    """One `session/prompt` from sending it to its end, run once (`run`); `cancel`,
    `ask_permission`, `ask_elicitation`, `authorize` and `terminal_ran` are how the rest of the
    client reaches it."""

    def __init__(
        self,
        line: SessionLine,
        agent: TurnAgent,
        hooks: TurnHooks[PromptTurn],
        approvals: TurnApprovals,
        *,
        gated: bool,
        timeout: float | None,
        on_text: Callable[[AcpEvent], None] | None = None,
    ) -> None:
        self.line = line
        self.agent = agent
        self.hooks = hooks
        self.quirks = agent.quirks
        # asked of every chunk: bound once
        self._claims = agent.quirks.claims
        self._take_chunk = agent.quirks.take_chunk
        # Every tool call of the turn, merged from its updates, and which a person allowed.
        self.approvals = approvals
        # The gate holds (see acp/tool_gate.py): a tool run with no person's approval is a
        # violation (acp/approval_cover.py says which).
        self.gated = gated
        self.timeout = timeout
        # Given: TEXT events go to it, synchronously and in order, instead of out of `run` (see
        # `take_text`). It must not block; what it raises ends the turn.
        self.on_text = on_text
        self.text = GrowingText()  # what the agent wrote in this turn
        self.tool_calls = 0
        self.files = 0  # files in the reply (delivered as they come: a resend would repeat them)
        self.refusal: RefusalInfo | None = None
        self.cancel_sent = False
        # The agent did not answer the cancel within its grace: it is hung and must be stopped.
        self.cancel_ignored = False
        self.asks = TurnAsks(line.inbox, approvals, line.session_id, agent.name)
        self._request_id: int | None = None
        self._message_id: str | None = None  # of the latest text chunk
        push = line.inbox.push
        self.clock = TurnClock(line.handle, lambda: push(WAKE))

    @property
    def partial_output(self) -> str:
        return str(self.text)

    @property
    def activity(self) -> bool:
        """Whether the agent visibly acted on the prompt (so resending it is unsafe)."""
        return self.tool_calls > 0 or self.files > 0 or self.text.visible

    # ---- control ----------------------------------------------------------------------------
    async def cancel(self, *, grace: float | None = None) -> None:
        """session/cancel once, then answer every pending permission `cancelled` and question
        `cancel` (ACP rule). The turn then waits at most `grace` (default: the cancel grace) for
        the agent's answer."""
        self.clock.grant_grace(self.agent.cancel_grace if grace is None else grace)
        if not self.cancel_sent:
            self.cancel_sent = True
            try:
                await self.line.handle.notify("session/cancel", {"sessionId": self.line.session_id})
            except AcpRuntimeError:
                log.debug("cancel not sent: the agent is gone")
        self.asks.close()

    async def ask_permission(self, pending: PendingPermission) -> str | None:
        """The agent's request, shown as the turn's next event; the person's answer noted."""
        answer = await self.asks.permission(pending)
        self.approvals.answered(pending, answer)
        return answer

    async def ask_elicitation(self, pending: PendingElicitation) -> ElicitationAnswer:
        """The agent's question, shown as the turn's next event; the person's answer."""
        return await self.asks.elicitation(pending)

    async def authorize(self, action: ClientAction) -> None:
        """A write or a command the agent asked of us, run only under an approval (`TurnAsks`)."""
        await self.asks.authorize(action)

    def terminal_ran(self, activity: TerminalActivity) -> None:
        """A terminal of this session ran or printed: told in order with the turn's events."""
        self.line.inbox.push(TerminalRan(activity))

    # ---- the turn ---------------------------------------------------------------------------
    async def run(self, prompt: PromptContent) -> AsyncIterator[AcpEvent]:
        """The turn's events, from sending the prompt to one TERMINAL event (or an error).

        Each streamed chunk passes through here, so the loop drains every item that has arrived
        before waiting again (one wake-up per burst), and the session's own bookkeeping is the
        `claim`/`release` hooks rather than another async-generator layer around this one."""
        hooks = self.hooks
        hooks.claim(self)
        line = self.line
        inbox = line.inbox
        items = inbox.items
        quirks = self.quirks
        take_chunk = self._take_chunk
        on_text = self.on_text
        observe = hooks.observe
        between_turns = inbox.take_now  # the session's, put back when the turn ends
        try:
            drain_notifications(items, observe)
            items.clear()  # leftovers of an earlier turn (e.g. a late stop reason)
            inbox.take_now = self.take_text if on_text is not None else None
            if hooks.restore_gate is not None:
                await hooks.restore_gate()
            params = {"sessionId": line.session_id, "prompt": prompt_blocks(prompt)}
            self._request_id = await line.handle.send_request(
                "session/prompt", params, inbox.deliver
            )
            self.clock.start(self.timeout)
            while True:
                if not items:
                    await inbox.wait()
                item = items.popleft()
                if type(item) is tuple:  # a notification: the common case first, a chunk
                    method, params = item
                    if method == "session/update":
                        event = parse_update(params)
                        if event is None or event.kind in _STATE:
                            observe(method, params)
                            if hooks.restore_gate is not None:
                                await hooks.restore_gate()
                    else:
                        observe(method, params)
                        event = quirks.notification(method, params)
                        if event is not None and event.kind is EventKind.REFUSAL:
                            self.refusal = event.refusal
                    if event is None:
                        continue
                    kind = event.kind
                    if kind is _TEXT and event.message_id != self._message_id:
                        event = self._separated(event)
                    if kind in _CONTENT:
                        if self.approvals.suspects:
                            await self._judge(event.tool.tool_call_id if event.tool else None)
                        if quirks.holding:  # more content: what they held may be output
                            for held in self._output(quirks.content_follows()):
                                yield held
                    if kind is _TEXT:
                        take = take_chunk(event)
                        if take is not _OUTPUT:
                            if take is Take.ENDS_TURN:
                                yield self._terminal(STOP_REASON_END_TURN, None, interrupted=True)
                                return
                            continue  # held
                        chunk = event.text
                        if "arning" in chunk and hooks.warn and injected_warning(chunk, self.text):
                            hooks.warn(" ".join(chunk.split()))  # a notice, not the answer
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
                        for held in self._output(quirks.status(event.raw)):
                            yield held
                    yield event
                elif type(item) is Answered:
                    for event in await self._answered(item.reply):
                        yield event
                    return
                elif type(item) is PermissionAsked:
                    if quirks.holding:  # a permission: what they held was output
                        for held in self._output(quirks.content_follows()):
                            yield held
                    asked = item.pending
                    await self._judge(asked.request.tool.tool_call_id, unasked=asked.unasked)
                    started = time.monotonic()
                    self.approvals.detail(asked)
                    yield AcpEvent(EventKind.PERMISSION, permission=asked)
                    self.clock.pause(time.monotonic() - started)
                elif type(item) is ElicitationAsked:
                    if quirks.holding:  # a question: what they held was output
                        for held in self._output(quirks.content_follows()):
                            yield held
                    started = time.monotonic()  # the time a person takes is not the turn's
                    yield AcpEvent(EventKind.ELICITATION, elicitation=item.pending)
                    self.clock.pause(time.monotonic() - started)
                elif type(item) is TerminalRan:
                    yield AcpEvent(EventKind.TERMINAL_ACTIVITY, terminal=item.activity)
                elif type(item) is Wake:
                    alarm = self.clock.woken()
                    if alarm == "grace over":
                        self.cancel_ignored = True
                        break
                    if alarm == "timed out":
                        await self.cancel(grace=min(self.agent.cancel_grace, TIMEOUT_CANCEL_WAIT))
                elif type(item) is TextTakerFailed:
                    raise item.error
                elif type(item) is AgentGone:
                    if self.clock.timed_out:
                        raise self._timeout_error()
                    raise AcpProcessDied(
                        getattr(item.cause, "returncode", None),
                        ambiguous_delivery=self.activity,
                        stderr_tail=self.agent.stderr_tail(),
                        partial_output=self.partial_output,
                    ) from item.cause
            if self.clock.timed_out:
                raise self._timeout_error()
            yield self._terminal(STOP_REASON_CANCELLED, None)
        finally:
            inbox.take_now = between_turns
            drain_notifications(items, observe)  # what came after the answer is state
            self.clock.stop()
            if self._request_id is not None:
                line.handle.forget(self._request_id)
            self.asks.close()
            hooks.release(self)

    async def _answered(self, reply: RpcReply) -> list[AcpEvent]:
        """The events that end a turn the agent answered; an error it ended in is raised."""
        if self.clock.timed_out:
            raise self._timeout_error()
        await self._judge()
        error = reply.error
        if error is not None:
            if self.quirks.ends_in_refusal(error, self.refusal is not None):
                return [self._terminal(STOP_REASON_REFUSAL, None)]
            raise self.agent.classify(error, self.partial_output)
        result = reply.result if isinstance(reply.result, dict) else {}
        failure = self.quirks.failure(result)
        if failure is not None:
            raise self.agent.classify(
                {"code": -32603, "message": "Internal error", "data": failure},
                self.partial_output,
            )
        return [*self._output(self.quirks.answered()), self._stats_event(result)]

    def _timeout_error(self) -> AcpTimeoutError:
        return AcpTimeoutError(self.timeout or 0.0, self.partial_output)

    # ---- tool calls and the gate ---------------------------------------------------------------
    async def _judge(self, next_tool: str | None = None, *, unasked: bool = False) -> None:
        suspect = self.approvals.judge(next_tool, unasked) if self.gated else None
        if suspect is not None:
            await self._stop_for_violation(suspect)

    async def _check_tool(self, tool: ToolCall) -> None:
        if self.gated and self.approvals.violates(tool):
            await self._stop_for_violation(tool)
        on_switch_mode = self.hooks.on_switch_mode
        if tool.kind == "switch_mode" and tool.status == "completed" and on_switch_mode:
            await on_switch_mode(tool)

    async def _stop_for_violation(self, tool: ToolCall) -> None:
        log.error(
            "tool gate violation: %s ran %s tool %s (id %s, %s) with no approval",
            self.agent.name,
            tool.kind or "a kindless",
            tool.describe(),
            tool.tool_call_id,
            tool.status,
        )
        await self.cancel()
        raise AcpGateViolation(self.agent.name, tool.describe(), self.partial_output)

    # ---- text ----------------------------------------------------------------------------------
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
        machine (other updates, a chunk the quirks claim, a warning) is left queued."""
        if method != "session/update" or self.quirks.holding:
            return False
        if self.approvals.suspects:  # a chunk now judges them: `run` does
            return False
        update = params.get("update") if type(params) is dict else None
        if type(update) is not dict or update.get("sessionUpdate") != "agent_message_chunk":
            return False
        event = parse_update(params)
        if event is None or event.kind is not _TEXT:
            return False
        chunk = event.text  # `in` first: it allocates nothing
        if self._claims(chunk) or (
            "arning" in chunk and self.hooks.warn and injected_warning(chunk, self.text)
        ):
            return False
        if event.message_id != self._message_id:
            event = self._separated(event)
        self.text.append(event.text)
        assert self.on_text is not None  # set whenever the inbox has this taker
        try:
            self.on_text(event)
        except Exception as exc:  # the reader serves every session: the turn raises it instead
            self.line.inbox.push(TextTakerFailed(exc))
        return True

    def _output(self, held: list[AcpEvent]) -> list[AcpEvent]:
        """Text the quirks held, now known to be output: counted, and sent to `on_text` or
        returned to be yielded."""
        for event in held:
            self.text.append(event.text)
        if self.on_text is not None:
            for event in held:
                self.on_text(event)
            return []
        return held

    def _stats_event(self, result: dict[str, Any]) -> AcpEvent:
        stop_reason = result.get("stopReason")
        if not isinstance(stop_reason, str) or not stop_reason:
            stop_reason = STOP_REASON_END_TURN
        if stop_reason == STOP_REASON_REFUSAL and self.refusal is None:
            if self.asks.answered_cancelled or self.cancel_sent:
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
