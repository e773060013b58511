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
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio

from acp import (
    AGENT_ERRORS,
    STOP_REASON_CANCELLED,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    AcpClient,
    AcpError,
    AcpEvent,
    AcpProcessDied,
    AcpPromptBusy,
    AcpPromptStats,
    AcpRuntimeError,
    AcpSession,
    EventKind,
    PendingPermission,
    RefusalInfo,
    UsageInfo,
    redact_links,
)
from bot.conversation import Binding
from bot.faults import fault_sentence, log_fault, new_turn_id
from bot.reply import ReplyStream
from bot.store import JournalEntry
from config import ConfigError, RetrySettings, valid_text
from surfaces.base import ConversationKey, Inbound, Surface, UserRef

if TYPE_CHECKING:
    from bot.app import BotApp

log = logging.getLogger(__name__)

CONTINUE_PROMPT = (
    "Your previous reply was cut off by an error. Continue exactly where you stopped, "
    "without repeating what you already wrote or redoing finished steps."
)
# A turn cut off by a restart is reported when its surface next runs; after a week unseen, the
# notice would only confuse, so the journal entry expires.
JOURNAL_TTL = 7 * 24 * 3600.0
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
    raise AcpError(
        "The agent ended the turn without saying how (no ACP stop reason); send the message "
        "again, and if it keeps happening, check that the agent speaks ACP.",
        kind="protocol",
    )


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
                exc.retries = reconnects_used
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
                    exc.retries = busy_used
                    raise
                busy_used += 1
                delay = policy.base_delay * 0.75
            else:
                if transient_used >= policy.transient_retries or continued:
                    exc.retries = transient_used
                    raise
                if attempt.activity:
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
    if refusal.explanation and not _already_streamed(refusal.explanation, streamed_text):
        lines.append(f"Reason: {refusal.explanation}")
    if refusal.recommended_model:
        lines.append(f"A model that may answer it: {refusal.recommended_model}")
    else:
        lines.append("Try rephrasing the request, or start a new conversation.")
    return "\n".join(lines)


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def _already_streamed(explanation: str, streamed_text: str) -> bool:
    """The parser capped and redacted the explanation; compare like with like."""
    core = _squash(explanation.removesuffix("…"))
    return core in _squash(redact_links(streamed_text))


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


# ---- one conversation ------------------------------------------------------------------------
@dataclass(slots=True)
class _Queued:
    inbound: Inbound
    done: anyio.Event


class ConversationSessions:
    """The conversation's agent session: reused while its agent lives, resumed with session/load
    after a restart or respawn when the agent can, else started fresh with a visible notice."""

    def __init__(self, runner: ChatRunner) -> None:
        self.runner = runner
        self.current: AcpSession | None = None

    async def session(self) -> AcpSession:
        engine = self.runner.engine
        client = await engine.client()
        if self.current is not None and self.current.client is client:
            return self.current
        key = self.runner.key
        binding = await engine.store.get_binding(key)
        notice = ""
        session: AcpSession | None = None
        if binding is not None:
            session, notice = await self._resume(client, binding)
            if session is None:
                client = await engine.client()  # a failed load may have taken the agent down
        if session is None:
            session = await client.open_session()
            model = binding.model if binding is not None else engine.settings.model
            if model and model != session.model:
                try:
                    await session.set_model(model)
                except AcpError as exc:
                    log.warning("could not select model %s: %s", model, exc)
                    notice = _join(
                        notice,
                        f"The model {model} is not available; using "
                        f"{session.model or 'the agent default'}.",
                    )
            generation = binding.generation + 1 if binding is not None else 0
            await engine.store.put_binding(
                key,
                Binding(
                    session.session_id,
                    client.backend.name,
                    str(client.runtime.workspace),
                    session.model,
                    generation,
                ),
            )
        self.current = session
        if notice:
            await self.runner.say(notice)
        return session

    async def _resume(self, client: AcpClient, binding: Binding) -> tuple[AcpSession | None, str]:
        lost = "Earlier context of this conversation could not be restored"
        if binding.backend != client.backend.name:
            return None, f"{lost}: the agent changed. Starting a new session."
        if binding.workspace != str(client.runtime.workspace):
            return None, f"{lost}: the workspace changed. Starting a new session."
        if not client.runtime.supports_load:
            return None, f"{lost}: the agent cannot resume sessions. Starting a new session."
        try:
            session = await client.load_session(binding.session_id, model=binding.model)
        except AGENT_ERRORS as exc:
            log.warning("could not resume session %s: %s", binding.session_id, exc)
            return None, f"{lost} (the agent could not resume it). Starting a new session."
        log.info("resumed session %s for %s", binding.session_id, self.runner.key)
        return session, ""

    async def reset(self) -> None:
        """The agent died: drop it so the next turn respawns (and resumes)."""
        self.drop()
        await self.runner.engine.discard_client()

    def drop(self) -> None:
        """Stop using the session here; the stored binding still lets it be resumed."""
        if self.current is not None:
            self.current.close()
        self.current = None

    async def forget(self) -> None:
        """Never resume this session: the next turn starts a new one."""
        self.drop()
        await self.runner.engine.store.delete_binding(self.runner.key)


class _ChatOutput:
    def __init__(self, runner: ChatRunner, reply: ReplyStream, requester: UserRef) -> None:
        self.runner = runner
        self.reply = reply
        self.requester = requester
        self.text = ""

    async def on_event(self, event: AcpEvent) -> None:
        kind = event.kind
        if kind is EventKind.TEXT:
            self.text += event.text
            self.reply.update(self.text)
        elif kind is EventKind.TOOL_CALL and event.tool is not None:
            self.reply.set_status(f"running {event.tool.describe()}")
        elif kind is EventKind.TOOL_UPDATE and event.tool is not None:
            if event.tool.status in ("completed", "failed"):
                self.reply.set_status(None)
        elif kind is EventKind.COMMANDS:
            self.runner.agent_commands = event.commands
        elif kind is EventKind.USAGE and event.usage is not None:
            self.runner.usage = event.usage

    async def on_permission(self, pending: PendingPermission) -> str | None:
        runner = self.runner
        return await runner.engine.approvals.ask(
            runner.surface, runner.key, self.requester, pending
        )

    async def on_retry(self, error: AcpError, delay: float) -> None:
        self.reply.set_status("a temporary error; retrying")


def _join(*parts: str) -> str:
    return "\n\n".join(part.strip("\n") for part in parts if part.strip())


class ChatRunner:
    """One conversation: one turn at a time; messages arriving mid-turn wait in a bounded queue
    (a burst from one person becomes one turn); never a second concurrent prompt."""

    def __init__(self, engine: BotApp, surface: Surface, key: ConversationKey) -> None:
        self.engine = engine
        self.surface = surface
        self.key = key
        self.sessions = ConversationSessions(self)
        self.queue: deque[_Queued] = deque()
        self.running = False
        self.turn_started = 0.0
        self.turn_id = ""  # names the running (or last) turn in log lines
        self.agent_commands: tuple[str, ...] = ()
        self.usage: UsageInfo | None = None
        self._turn_scope: anyio.CancelScope | None = None

    async def say(self, text: str) -> None:
        await self.engine.deliver(self.surface, self.key, text)

    async def submit(self, inbound: Inbound) -> anyio.Event:
        done = inbound.handled or anyio.Event()
        if len(self.queue) >= self.engine.settings.queue_limit:
            await self.say("Too many messages are waiting; send this again after the reply.")
            done.set()
            return done
        self.queue.append(_Queued(inbound, done))
        if self.running:
            await self.say("Queued; it goes to the agent when the current reply is done.")
        else:
            self.running = True
            self.engine.spawn(self._work)
        return done

    async def _work(self) -> None:
        try:
            while self.queue:
                batch = [self.queue.popleft()]
                while self.queue and self.queue[0].inbound.user == batch[0].inbound.user:
                    batch.append(self.queue.popleft())
                self.turn_id = new_turn_id()
                try:
                    with anyio.CancelScope() as scope:
                        self._turn_scope = scope
                        await self._turn([queued.inbound for queued in batch])
                except Exception as exc:  # e.g. the surface failed delivering: this turn only
                    self._log_fault(exc, "delivering a reply")
                    await self._tell_fault(exc)
                finally:
                    self._turn_scope = None
                    for queued in batch:
                        queued.done.set()
        finally:  # a crash never leaves the conversation busy
            self.running = False
            for queued in self.queue:
                queued.done.set()
            self.queue.clear()

    async def _turn(self, batch: list[Inbound]) -> None:
        text = "\n\n".join(inbound.text for inbound in batch)
        requester = batch[0].user
        engine = self.engine
        self.turn_started = time.monotonic()
        async with (
            self._journalled(requester) as turn_id,
            engine.open_reply(self.surface, self.key) as reply,
        ):
            output = _ChatOutput(self, reply, requester)
            notice = ""
            try:
                try:
                    stats = await self._run(text, output)
                except AcpPromptBusy:
                    # the agent still runs an earlier prompt: a fresh session, replayed once
                    await self.sessions.forget()
                    stats = await self._run(text, output)
                if stats.refusal is not None:
                    notice = refusal_card_text(stats.refusal, output.text)
                else:
                    notice = stop_notice(stats)
            except (*AGENT_ERRORS, ConfigError) as exc:
                if isinstance(exc, AcpProcessDied | AcpRuntimeError):
                    self.sessions.drop()
                notice = valid_text(str(exc))  # may quote the agent
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await engine.finish_reply(
                        reply,
                        self.key,
                        _join(output.text, "(stopped: Switchboard is shutting down)"),
                        turn_id=turn_id,
                    )
                raise
            except Exception as exc:  # a fault of ours ends this turn, not the process
                self._log_fault(exc, "answering")
                notice = fault_sentence(exc)
            final = _join(output.text, notice) or "The agent finished without writing a reply."
            await engine.finish_reply(reply, self.key, final, turn_id=turn_id)

    @asynccontextmanager
    async def _journalled(self, requester: UserRef) -> AsyncIterator[str]:
        """The turn is in the store's journal while it runs, so a restart after the process died
        mid-turn can tell the person (`BotApp._tell_cut_off_turns`). Its final text normally
        closes it (`finish_reply(turn_id=...)`); closing again here covers a turn that ended
        without one, which no restart should report as cut off."""
        turn = JournalEntry(self.turn_id, self.key, requester.id, time.time())
        await self.engine.store.journal_open(turn, JOURNAL_TTL)
        try:
            yield turn.turn_id
        finally:
            with anyio.CancelScope(shield=True):  # bounded by the store's busy timeout
                await self.engine.store.journal_close(turn.turn_id)

    def _log_fault(self, exc: Exception, doing: str) -> None:
        session = self.sessions.current
        runtime = session.client.runtime if session is not None else None
        log_fault(exc, doing, self.key, runtime, turn=self.turn_id)

    async def _tell_fault(self, exc: Exception) -> None:
        """Best effort: the surface that just failed may fail again (already logged once)."""
        try:
            with anyio.move_on_after(self.engine.settings.request_timeout):
                await self.say(fault_sentence(exc))
        except Exception as again:
            log.warning("could not tell %s about the fault: %r", self.key, again)

    async def _run(self, text: str, output: _ChatOutput) -> AcpPromptStats:
        return await run_turn(
            self.sessions,
            text,
            output,
            policy=self.engine.policy,
            timeout=self.engine.settings.prompt_timeout,
        )

    async def stop(self) -> tuple[bool, int]:
        """/stop: cancel the running turn, drop the queue and pending approvals. Returns whether
        a turn was cancelled and how many queued messages were dropped."""
        dropped = len(self.queue)
        for queued in self.queue:
            queued.done.set()
        self.queue.clear()
        session = self.sessions.current
        if not self.running or session is None or not session.busy:
            return False, dropped
        await session.cancel()
        return True, dropped

    def hard_stop(self) -> None:
        if self._turn_scope is not None:
            self._turn_scope.cancel()
