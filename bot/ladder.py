"""The retry ladder: one turn against an agent session, retried by error type (never by
message text), shared by the chat runner and the one-shot `ask` command.

- transient errors (throttling, 5xx, connection, momentary failures) are retried with backoff,
  about 2/4/8 s with jitter; prompt-busy has a short budget of its own, then one replay on a
  fresh session where the caller can start one (`renew`);
- the agent process dying before it did anything respawns it and resends (reconnect budget);
- once the agent streamed text or started a tool, the prompt is never resent verbatim: at most one
  continuation prompt, else the partial output and the error;
- terminal errors, refusals, timeouts and cancels skip the ladder.

Whether a prompt may be resent, and what a busy agent gets, is decided here and nowhere else
(from what the ladder saw the attempt do). The attempts and the waits between them run on
`stamina` (its test mode, `stamina.set_testing`, makes the waits zero)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

import anyio
import stamina

from acp import (
    ELICITATION_CANCEL,
    AcpError,
    AcpEvent,
    AcpProcessDied,
    AcpPromptBusy,
    AcpPromptStats,
    AcpSession,
    AcpTimeoutError,
    ElicitationAnswer,
    EventKind,
    PendingElicitation,
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

    async def on_elicitation(self, pending: PendingElicitation) -> ElicitationAnswer:
        """The agent's question (a form, or a link to open): the answer to send it; may raise
        to stop the turn (the question is then answered `cancel`)."""
        ...

    def on_retry(self, error: AcpError, delay: float) -> None:
        """The ladder tries again after `delay` seconds; must return at once."""
        ...


# Starts a fresh session for a prompt the agent's current one is still busy with.
Renew = Callable[[], Awaitable[None]]


async def _stream(
    session: AcpSession,
    prompt: PromptContent,
    output: TurnOutput,
    walk: _Walk,
    timeout: float | None,
) -> AcpPromptStats:
    def on_text(event: AcpEvent) -> None:
        chunk = event.text
        if not walk.activity and chunk.strip():
            walk.activity = True
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
            if kind is EventKind.ELICITATION:
                assert event.elicitation is not None
                await _answer_question(session, event.elicitation, output, walk)
                continue
            if kind is EventKind.TOOL_CALL or kind is EventKind.FILE or kind is EventKind.SUBAGENT:
                walk.activity = True  # a subagent at work has acted too: never sent again
            await output.on_event(event)
    raise AcpError(
        "The agent ended the turn without saying how (no ACP stop reason); send the message "
        "again, and if it keeps happening, check that the agent speaks ACP.",
        kind="protocol",
    )


async def _answer_question(
    session: AcpSession, pending: PendingElicitation, output: TurnOutput, walk: _Walk
) -> None:
    """The agent's question, answered as a permission is: the output's answer sent, or on a
    failure (or the turn's end) `cancel` and the turn cancelled. A person answered: the prompt
    is never resent verbatim after it."""
    walk.activity = True
    try:
        answer = await output.on_elicitation(pending)
    except BaseException:
        pending.respond(ElicitationAnswer(ELICITATION_CANCEL, {}))
        with anyio.CancelScope(shield=True):
            await session.cancel()
        raise
    pending.respond(answer)


class _Walk:
    """One turn's way down the ladder: the budgets spent, the text shown over its attempts, and
    what the next attempt sends. `stamina` runs the attempts and the waits between them; `decide`
    (its backoff hook) is the one place that says whether, and after how long, a failed attempt
    is tried again, and readies what the next one needs (a respawn, a fresh session)."""

    __slots__ = (
        "activity",
        "began",
        "busy_used",
        "continued",
        "deadline",
        "output",
        "policy",
        "prompt",
        "prompted",
        "reconnects_used",
        "renew",
        "renew_due",
        "renewed",
        "reset_due",
        "shown",
        "source",
        "timeout",
        "transient_used",
    )

    def __init__(
        self,
        source: SessionSource,
        prompt: PromptContent,
        output: TurnOutput,
        policy: RetryPolicy,
        timeout: float | None,
        renew: Renew | None,
    ) -> None:
        self.source = source
        self.prompt = prompt
        self.output = output
        self.policy = policy
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.renew = renew
        self.transient_used = self.busy_used = self.reconnects_used = 0
        self.continued = False  # the continuation prompt was sent
        self.renewed = False  # the prompt went once to a fresh session after the agent was busy
        self.shown = ""  # text already delivered over earlier attempts
        # The attempt under way: whether its prompt reached the agent, when, and whether the
        # agent visibly acted on it (text or a tool or a file: resending it is then unsafe).
        self.prompted = False
        self.began = 0.0
        self.activity = False
        self.reset_due = False  # the agent died before answering: respawn it first
        self.renew_due = False  # the agent stayed busy: a fresh session first

    async def attempt(self) -> AcpPromptStats:
        self.prompted = self.activity = False
        if self.reset_due:
            self.reset_due = False
            await self.source.reset()
        if self.renew_due:
            self.renew_due = False
            assert self.renew is not None
            await self.renew()
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            raise AcpTimeoutError(self.timeout or 0.0, self.shown)
        session = await self.source.session()
        self.prompted, self.began = True, time.monotonic()
        try:
            return await _stream(session, self.prompt, self.output, self, left)
        except AcpTimeoutError as exc:
            if self.timeout is None:
                raise
            # The attempt had what was left; the person set (and reads) the whole turn's limit.
            raise AcpTimeoutError(self.timeout, self.shown + exc.partial_output) from exc

    def decide(self, exc: Exception) -> bool | float:
        """False: `exc` ends the turn (carrying the partial output and the retries spent); else
        the seconds to wait before the next attempt."""
        if not isinstance(exc, AcpError) or not self.prompted or isinstance(exc, AcpTimeoutError):
            return False  # ours, a failure to reach the agent at all, or out of time
        self.shown += exc.partial_output
        exc.partial_output = self.shown
        if isinstance(exc, AcpProcessDied):
            return self._respawn(exc)
        if not exc.transient:
            return False
        if isinstance(exc, AcpPromptBusy):
            if self.busy_used >= self.policy.busy_retries:
                return self._replay_fresh(exc)
            self.busy_used += 1
            delay: float | None = self.policy.base_delay * 0.75
        else:
            delay = self._transient(exc)
        if delay is None:
            return False
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            # the retry just counted will not happen
            exc.retries = (
                self.busy_used if isinstance(exc, AcpPromptBusy) else self.transient_used
            ) - 1
            exc.stopped_because = (
                f"the turn's time limit of {self.timeout:g} s left no time to try again"
            )
            return False
        log.info("retrying after %s error in %.1f s", exc.kind, delay)
        self.output.on_retry(exc, delay)
        return delay

    def _respawn(self, exc: AcpProcessDied) -> bool | float:
        """The agent died: started again and prompted again only when it had not acted yet."""
        if self.activity or self.reconnects_used >= self.policy.reconnects:
            exc.retries = self.reconnects_used
            return False
        self.reconnects_used += 1
        log.info("agent died before answering; respawning (%d)", self.reconnects_used)
        self.reset_due = True
        return 0.0

    def _replay_fresh(self, exc: AcpPromptBusy) -> bool | float:
        """The agent stayed busy with an earlier prompt through the busy budget: the prompt goes
        once more, at once, to a fresh session (where the caller can start one)."""
        if self.renew is None or self.renewed:
            exc.retries = self.busy_used
            return False
        self.renewed, self.renew_due, self.busy_used = True, True, 0
        log.info("the agent stayed busy; replaying the prompt once on a fresh session")
        return 0.0

    def _transient(self, exc: AcpError) -> float | None:
        if self.transient_used >= self.policy.transient_retries or self.continued:
            exc.retries = self.transient_used
            return None
        spent = time.monotonic() - self.began
        if spent >= self.policy.long_attempt and not self.activity:
            exc.retries = self.transient_used
            exc.stopped_because = (
                f"the agent had already spent {spent:.0f} s on it, retrying on its own, "
                "so Switchboard did not start it over"
            )
            return None
        if self.activity:
            self.continued = True
            self.prompt = CONTINUE_PROMPT
        self.transient_used += 1
        return self.policy.backoff(self.transient_used)


async def run_turn(
    source: SessionSource,
    prompt: PromptContent,
    output: TurnOutput,
    *,
    policy: RetryPolicy,
    timeout: float | None = None,
    renew: Renew | None = None,
) -> AcpPromptStats:
    """Run one turn to its stop reason, walking the ladder; a failure that ends it carries the
    partial output shown so far and the retries spent (`partial_output`, `retries`).

    `prompt` is text or content blocks (files): resent verbatim when nothing happened yet; the
    continuation prompt after a partial reply is text.

    `timeout` bounds the whole turn, retries and the waits between them included: each attempt
    gets what is left, and no retry starts that could not finish in time. An attempt that spent
    `policy.long_attempt` seconds or more before a transient error, without writing anything,
    was the agent retrying on its own: it is not retried from zero again.

    `renew` starts a fresh session in place of one whose agent stays busy with an earlier
    prompt (the prompt is replayed there once); without it, the busy error ends the turn."""
    walk = _Walk(source, prompt, output, policy, timeout, renew)
    # The first attempt runs before any retry machinery is built: nearly every turn needs none,
    # and with a thousand turns at once its few kilobytes each add up. Its failure is then the
    # first attempt's outcome in stamina's loop, decided like every later one.
    try:
        return await walk.attempt()
    except Exception as exc:
        first: Exception | None = exc
    # Every limit is the walk's (`decide`): stamina's own attempts and timeout are off.
    async for attempt in stamina.retry_context(on=walk.decide, attempts=None, timeout=None):
        with attempt:
            if first is not None:
                failed, first = first, None
                raise failed
            return await walk.attempt()
    raise AssertionError("unreachable: stamina re-raises the error that ends the walk")
