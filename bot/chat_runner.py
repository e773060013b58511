"""Runs one turn: prompt the agent, hand its events to the output, and walk the retry ladder.

The ladder, by error type (never by message text):
- transient errors (throttling, 5xx, connection, momentary failures) are retried with backoff,
  about 2/4/8 s with jitter; prompt-busy has a short budget of its own;
- the agent process dying before it did anything respawns it and resends (reconnect budget);
- once the agent streamed text or started a tool, the prompt is never resent verbatim: at most one
  continuation prompt, else the partial output and the error;
- terminal errors, refusals, timeouts and cancels skip the ladder."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

import anyio

from acp import (
    STOP_REASON_CANCELLED,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    AcpError,
    AcpEvent,
    AcpProcessDied,
    AcpPromptBusy,
    AcpPromptStats,
    AcpSession,
    EventKind,
    PendingPermission,
    RefusalInfo,
)
from config import RetrySettings

log = logging.getLogger(__name__)

CONTINUE_PROMPT = (
    "Your previous reply was cut off by an error. Continue exactly where you stopped, "
    "without repeating what you already wrote or redoing finished steps."
)
_jitter = random.SystemRandom()  # not the PID: every container is PID 1


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    transient_retries: int = 3
    base_delay: float = 2.0
    jitter: float = 0.25
    reconnects: int = 3
    busy_retries: int = 2

    @classmethod
    def from_settings(cls, settings: RetrySettings) -> RetryPolicy:
        return cls(
            transient_retries=settings.transient_retries,
            base_delay=settings.base_delay,
            jitter=settings.jitter,
            reconnects=settings.reconnects,
        )

    def backoff(self, attempt: int) -> float:
        base = self.base_delay * 2.0 ** (attempt - 1)
        return float(base + _jitter.uniform(0, self.jitter * base))


class SessionSource(Protocol):
    """Where a turn gets its session; `reset` drops a dead agent so the next call respawns."""

    async def session(self) -> AcpSession: ...

    async def reset(self) -> None: ...


class TurnOutput(Protocol):
    async def on_event(self, event: AcpEvent) -> None: ...

    async def on_permission(self, pending: PendingPermission) -> str | None:
        """Return the chosen option id, or None for `cancelled`; may raise to stop the turn."""
        ...

    async def on_retry(self, error: AcpError, delay: float) -> None: ...


@dataclass(slots=True)
class _Attempt:
    activity: bool = False
    text: str = ""


async def _stream(
    session: AcpSession, prompt: str, output: TurnOutput, attempt: _Attempt, timeout: float | None
) -> AcpPromptStats:
    events: AsyncIterator[AcpEvent] = session.prompt(prompt, timeout=timeout)
    async with aclosing(events):  # type: ignore[type-var]
        async for event in events:
            kind = event.kind
            if kind is EventKind.TERMINAL:
                assert event.stats is not None
                return event.stats
            if kind is EventKind.PERMISSION:
                assert event.permission is not None
                try:
                    answer = await output.on_permission(event.permission)
                except BaseException:
                    event.permission.respond(None)
                    with anyio.CancelScope(shield=True):
                        await session.cancel()
                    raise
                event.permission.respond(answer)
                continue
            if kind is EventKind.TEXT:
                if event.text.strip():
                    attempt.activity = True
                attempt.text += event.text
            elif kind is EventKind.TOOL_CALL:
                attempt.activity = True
            await output.on_event(event)
    raise AcpError("The agent ended the turn without saying how.", kind="protocol")


async def run_turn(
    source: SessionSource,
    text: str,
    output: TurnOutput,
    *,
    policy: RetryPolicy,
    timeout: float | None = None,
) -> AcpPromptStats:
    transient_used = busy_used = reconnects_used = 0
    continued = False
    prompt = text
    shown = ""  # text already delivered over earlier attempts
    while True:
        attempt = _Attempt()
        session = await source.session()
        try:
            return await _stream(session, prompt, output, attempt, timeout)
        except AcpProcessDied as exc:
            shown += attempt.text
            if exc.ambiguous_delivery or attempt.activity or reconnects_used >= policy.reconnects:
                exc.partial_output = shown
                raise
            reconnects_used += 1
            log.info("agent died before answering; respawning (%d)", reconnects_used)
            await source.reset()
            continue
        except AcpError as exc:
            shown += attempt.text
            exc.partial_output = shown
            if not exc.transient:
                raise
            if isinstance(exc, AcpPromptBusy):
                if busy_used >= policy.busy_retries:
                    raise
                busy_used += 1
                delay = policy.base_delay * 0.75
            else:
                if transient_used >= policy.transient_retries:
                    raise
                if attempt.activity or continued:
                    if continued:
                        raise
                    continued = True
                    prompt = CONTINUE_PROMPT
                transient_used += 1
                delay = policy.backoff(transient_used)
            log.info("retrying after %s error in %.1f s", exc.kind, delay)
            await output.on_retry(exc, delay)
            await anyio.sleep(delay)


def refusal_card_text(refusal: RefusalInfo, streamed_text: str) -> str:
    """A lead line, then one line per field the provider gave; an explanation the agent already
    streamed is not repeated. Never offers a retry: the same request would be refused again."""
    lines = ["The model declined to answer this request."]
    if refusal.category:
        lines.append(f"Category: {refusal.category}")
    if refusal.explanation and _squash(refusal.explanation) not in _squash(streamed_text):
        lines.append(f"Reason: {refusal.explanation}")
    if refusal.recommended_model:
        lines.append(f"A model that may answer it: {refusal.recommended_model}")
    else:
        lines.append("Try rephrasing the request, or start a new conversation.")
    return "\n".join(lines)


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def stop_notice(stats: AcpPromptStats) -> str:
    """A short honest line for turns that ended some other way than a plain answer."""
    if stats.interrupted:
        return "The agent's tool use was interrupted; send your next message to continue."
    if stats.stop_reason == STOP_REASON_MAX_TOKENS:
        return "The answer hit the model's output limit and was cut off; ask for smaller steps."
    if stats.stop_reason == STOP_REASON_MAX_TURN_REQUESTS:
        return (
            "The agent reached its limit of model requests for one turn; "
            "send a follow-up to let it continue."
        )
    if stats.stop_reason == STOP_REASON_CANCELLED:
        return "The turn was stopped."
    return ""
