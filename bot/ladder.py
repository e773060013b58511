"""The retry ladder: one turn against an agent session, retried by error type (never by
message text), shared by the chat runner and the one-shot `ask` command.

- transient errors (throttling, 5xx, connection, momentary failures) are retried with backoff,
  about 2/4/8 s with jitter; prompt-busy has a short budget of its own;
- the agent process dying before it did anything respawns it and resends (reconnect budget);
- once the agent streamed text or started a tool, the prompt is never resent verbatim: at most one
  continuation prompt, else the partial output and the error;
- terminal errors, refusals, timeouts and cancels skip the ladder."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

import anyio

from acp import (
    AcpError,
    AcpEvent,
    AcpProcessDied,
    AcpPromptBusy,
    AcpPromptStats,
    AcpSession,
    AcpTimeoutError,
    EventKind,
    PendingPermission,
    PromptContent,
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
    """How far the ladder goes: retries per error type and the backoff between them."""

    transient_retries: int = 3
    base_delay: float = 2.0
    jitter: float = 0.25
    reconnects: int = 3
    busy_retries: int = 2
    # An attempt this long (s) before a transient error, with nothing written, means the agent
    # was retrying on its own: not started over.
    long_attempt: float = 30.0

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
    """Where a turn's events go: a chat reply stream, or stdout for `ask`."""

    def on_text(self, text: str) -> None:
        """A chunk of the reply. Called for every chunk, often straight from the agent's frame
        reader, so it must return at once (no I/O that can block)."""
        ...

    async def on_event(self, event: AcpEvent) -> None:
        """Any other event (tool calls, usage, commands, ...)."""
        ...

    async def on_permission(self, pending: PendingPermission) -> str | None:
        """Return the chosen option id, or None for `cancelled`; may raise to stop the turn."""
        ...

    async def on_retry(self, error: AcpError, delay: float) -> None: ...


@dataclass(slots=True)
class _Attempt:
    """What one attempt did: whether it may be resent (the text it streamed is the partial
    output of the error that ends it)."""

    activity: bool = False


async def _stream(
    session: AcpSession,
    prompt: PromptContent,
    output: TurnOutput,
    attempt: _Attempt,
    timeout: float | None,
) -> AcpPromptStats:
    def on_text(event: AcpEvent) -> None:
        chunk = event.text
        if not attempt.activity and chunk.strip():
            attempt.activity = True
        output.on_text(chunk)

    events: AsyncIterator[AcpEvent] = session.prompt(prompt, timeout=timeout, on_text=on_text)
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
            if kind is EventKind.TOOL_CALL or kind is EventKind.FILE:
                attempt.activity = True
            await output.on_event(event)
    raise AcpError(
        "The agent ended the turn without saying how (no ACP stop reason); send the message "
        "again, and if it keeps happening, check that the agent speaks ACP.",
        kind="protocol",
    )


async def run_turn(
    source: SessionSource,
    prompt: PromptContent,
    output: TurnOutput,
    *,
    policy: RetryPolicy,
    timeout: float | None = None,
) -> AcpPromptStats:
    """Run one turn to its stop reason, walking the ladder; a failure that ends it carries the
    partial output shown so far and the retries spent (`partial_output`, `retries`).

    `prompt` is text or content blocks (files): resent verbatim when nothing happened yet; the
    continuation prompt after a partial reply is text.

    `timeout` bounds the whole turn, retries and the waits between them included: each attempt
    gets what is left, and no retry starts that could not finish in time. An attempt that spent
    `policy.long_attempt` seconds or more before a transient error, without writing anything,
    was the agent retrying on its own: it is not retried from zero again."""
    transient_used = busy_used = reconnects_used = 0
    continued = False
    shown = ""  # text already delivered over earlier attempts
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        attempt = _Attempt()
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise AcpTimeoutError(timeout or 0.0, shown)
        session = await source.session()
        began = time.monotonic()
        try:
            return await _stream(session, prompt, output, attempt, left)
        except AcpTimeoutError as exc:
            if timeout is None:
                raise
            # The attempt had what was left; the person set (and reads) the whole turn's limit.
            raise AcpTimeoutError(timeout, shown + exc.partial_output) from exc
        except AcpProcessDied as exc:
            shown += exc.partial_output
            if exc.ambiguous_delivery or attempt.activity or reconnects_used >= policy.reconnects:
                exc.partial_output = shown
                exc.retries = reconnects_used
                raise
            reconnects_used += 1
            log.info("agent died before answering; respawning (%d)", reconnects_used)
            await source.reset()
            continue
        except AcpError as exc:
            shown += exc.partial_output
            exc.partial_output = shown
            if not exc.transient:
                raise
            if isinstance(exc, AcpPromptBusy):
                if busy_used >= policy.busy_retries:
                    exc.retries = busy_used
                    raise
                busy_used += 1
                delay = policy.base_delay * 0.75
            else:
                if transient_used >= policy.transient_retries or continued:
                    exc.retries = transient_used
                    raise
                spent = time.monotonic() - began
                if spent >= policy.long_attempt and not attempt.activity:
                    exc.retries = transient_used
                    exc.stopped_because = (
                        f"the agent had already spent {spent:.0f} s on it, retrying on its own, "
                        "so Switchboard did not start it over"
                    )
                    raise
                if attempt.activity:
                    continued = True
                    prompt = CONTINUE_PROMPT
                transient_used += 1
                delay = policy.backoff(transient_used)
            if deadline is not None and time.monotonic() + delay >= deadline:
                # the retry just counted will not happen
                exc.retries = (busy_used if isinstance(exc, AcpPromptBusy) else transient_used) - 1
                exc.stopped_because = (
                    f"the turn's time limit of {timeout:g} s left no time to try again"
                )
                raise
            log.info("retrying after %s error in %.1f s", exc.kind, delay)
            await output.on_retry(exc, delay)
            await anyio.sleep(delay)
