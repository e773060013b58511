"""`ChatRunner`: one conversation, one turn at a time. It queues what arrives mid-turn, runs
each turn through the retry ladder (`bot.ladder`) with the reply stream as its output, closes it
with the final text and a notice (`bot.notices`), and keeps a fault to the turn it happened in.

It depends on `ConversationServices` (the agent pool, replies, the store, approvals), never on
the app that implements them. A runner lives while its conversation is in use: the app releases
one that has been `idle` for a while (`release` lets go of its session objects, the agent keeps
the session) and builds a new one for the next message."""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import anyio

from acp import (
    AGENT_ERRORS,
    STOP_REASON_CANCELLED,
    AcpError,
    AcpEvent,
    AcpGateViolation,
    AcpProcessDied,
    AcpPromptBusy,
    AcpPromptStats,
    AcpRuntimeError,
    AgentCommand,
    AgentFile,
    EventKind,
    NoticeKind,
    PendingPermission,
    SessionNotice,
    UsageInfo,
)
from bot.agent_sessions import ConversationSessions
from bot.attachments import FileLimits, Intake, prompt_for, take_in
from bot.cluster import encode_event
from bot.faults import (
    fault_sentence,
    log_fault,
    new_turn_id,
    report_store_full,
    told_without_store,
)
from bot.ladder import run_turn
from bot.markdown_split import split_message
from bot.metrics import AGENT_ERROR, ANSWERED, FAULT, REFUSED, SHUTDOWN, STOPPED
from bot.notices import (
    SHUTDOWN_NOTE,
    compact_hint,
    compact_level,
    context_percent,
    join_paragraphs,
    refusal_card_text,
    session_notice_text,
    stop_notice,
    usage_footer,
)
from bot.outbound_files import deliver_files, reply_as_file
from bot.permissions import audit_violation
from bot.progress import TICK_INTERVAL as PROGRESS_TICK
from bot.progress import TurnProgress
from bot.reply import ReplyStream
from bot.services import ConversationServices
from bot.store import JournalEntry, LeaseLost, StoreError, StoreFull
from config import ConfigError, valid_text
from surfaces.base import (
    Choice,
    ConversationKey,
    Inbound,
    MenuCommand,
    OutgoingFile,
    Surface,
    UserRef,
)
from surfaces.errors import SurfaceError
from surfaces.text import ellipsize

# Callers know `refusal_card_text` as the runner's (it writes the card a refused turn ends with);
# it lives in bot.notices with the other notices, shared with the CLI.
__all__ = ["JOURNAL_TTL", "STOP_TOKEN_PREFIX", "ChatRunner", "refusal_card_text"]

log = logging.getLogger(__name__)

# A turn cut off by a restart is reported when its surface next runs; after a week unseen, the
# notice would only confuse, so the journal entry expires.
JOURNAL_TTL = 7 * 24 * 3600.0
# Agent notices waiting to be said in one conversation; an agent that floods them loses the oldest.
NOTICE_BACKLOG = 16
# The live reply's Stop button hands back a token with this prefix (approval tokens have none).
STOP_TOKEN_PREFIX = "stop:"
FILES_KEPT = 50  # agent files remembered per turn; past it they are dropped with a log line
# The agent's commands put into a platform menu, and how long each field may be.
MENU_LIMIT = 100
MENU_NAME_CHARS, MENU_TEXT_CHARS = 64, 200


@dataclass(slots=True)
class _Queued:
    inbound: Inbound
    done: anyio.Event
    journal_id: str = ""  # its journal entry while it waits behind a running turn


class _ChatOutput:
    """A turn's output in a chat: text and progress (plan, tools, elapsed time) go to the live
    reply, the agent's files are kept for after the final, approvals go to the broker. (The
    agent's commands and context usage are the session's state, kept in acp.)"""

    def __init__(self, runner: ChatRunner, reply: ReplyStream, requester: UserRef) -> None:
        self.runner = runner
        self.reply = reply
        self.requester = requester
        self.text = ""
        self.progress = TurnProgress()
        self.files: list[AgentFile] = []
        self.started = time.monotonic()
        self._ticking = anyio.CancelScope()

    def on_text(self, text: str) -> None:
        if text and not self.text:
            self.runner.services.metrics.first_text.observe(time.monotonic() - self.started)
        self.text += text
        self.reply.update(self.text)

    def show_progress(self) -> None:
        self.reply.set_status(self.progress.block(time.monotonic() - self.started))

    async def tick(self) -> None:
        """Refresh the elapsed time while the turn runs (the reply stream paces the edits and
        skips one that changes nothing); `stop_ticking` ends it."""
        with self._ticking:
            while True:
                await anyio.sleep(self.runner.tick_interval)
                self.show_progress()

    def stop_ticking(self) -> None:
        self._ticking.cancel()

    async def on_event(self, event: AcpEvent) -> None:
        if event.kind is EventKind.FILE and event.file is not None:
            if len(self.files) < FILES_KEPT:
                self.files.append(event.file)
            else:
                log.info("%s: more than %d agent files; dropping", self.runner.key, FILES_KEPT)
            return
        if self.progress.on_event(event):
            self.show_progress()

    async def on_permission(self, pending: PendingPermission) -> str | None:
        runner = self.runner
        answer = await runner.services.approvals.ask(
            runner.surface, runner.key, self.requester, pending
        )
        self.progress.permission_answered(pending.request, answer)
        return answer

    async def on_retry(self, error: AcpError, delay: float) -> None:
        self.runner.services.metrics.retried(error)
        self.progress.retrying()
        self.show_progress()


class ChatRunner:
    """One conversation: one turn at a time; messages arriving mid-turn wait in a bounded queue
    (a burst from one person becomes one turn); never a second concurrent prompt."""

    def __init__(
        self, services: ConversationServices, surface: Surface, key: ConversationKey
    ) -> None:
        self.services = services
        self.surface = surface
        self.key = key
        self.sessions = ConversationSessions(services, key, self.say, self._on_agent_notice)
        self.queue: deque[_Queued] = deque()
        self.running = False
        self._idle: anyio.Event | None = None  # set when the work `running` stands for ends
        self._answered = False  # the running turn's final text has been delivered
        self.turn_started = 0.0
        self.turn_id = ""  # names the running (or last) turn in log lines
        # What a released runner knew of the agent's state (the app hands it on); the live
        # session's state wins once it has any.
        self._known_commands: tuple[str, ...] = ()
        self._known_usage: UsageInfo | None = None
        self.last_requester: UserRef | None = None  # whose message started the latest turn
        self._notices: deque[str] = deque(maxlen=NOTICE_BACKLOG)
        self._telling = False  # a task is delivering `_notices`
        self._turn_scope: anyio.CancelScope | None = None
        self._holds = 0  # commands answering here right now (`held`)
        self.idle_since = time.monotonic()  # when the last turn or command here ended
        self.stop_token = ""  # the running turn's Stop button, where the surface shows one
        self.tick_interval = PROGRESS_TICK  # how often a quiet turn refreshes its elapsed time
        self.compact_told = 0  # the context threshold last suggested /compact for
        self.menu_shown: tuple[AgentCommand, ...] = ()  # the agent menu the surface shows
        self._menu_wanted: tuple[AgentCommand, ...] = ()
        self._menu_syncing = False
        self._waiting_ids: list[str] = []  # journal entries of the batch the turn took

    @property
    def agent_commands(self) -> tuple[str, ...]:
        """The agent's own command names, as its session last listed them."""
        session = self.sessions.current
        names = session.state.command_names if session is not None else ()
        return names or self._known_commands

    @agent_commands.setter
    def agent_commands(self, names: tuple[str, ...]) -> None:
        self._known_commands = names

    @property
    def usage(self) -> UsageInfo | None:
        """The context use the agent last reported for this conversation's session."""
        session = self.sessions.current
        usage = session.state.usage if session is not None else None
        return usage or self._known_usage

    @usage.setter
    def usage(self, usage: UsageInfo | None) -> None:
        self._known_usage = usage

    def _on_agent_notice(self, notice: SessionNotice) -> None:
        """From the frame reader (it must not block): the notice is said in order, by one task
        at a time, in the app's task group."""
        prefix = self.surface.capabilities.command_prefixes[0]
        self._notices.append(session_notice_text(notice, self.last_requester, prefix))
        if notice.kind is NoticeKind.GATE_RESTORED:
            self.services.spawn(lambda: self._audit_gate_restored(notice))
        if not self._telling:
            self._telling = True
            self.services.spawn(self._tell_notices)

    async def _audit_gate_restored(self, notice: SessionNotice) -> None:
        """The agent switched its approvals off and Switchboard put them back: on the record,
        against the person whose message started the latest turn here."""
        who = self.last_requester
        await self.services.audit.refused(
            self.key.surface,
            who.id if who is not None else "",
            "agent switched approvals off",
            conversation=str(self.key),
            agent_set=notice.previous,
            restored=notice.detail,
        )

    async def _tell_notices(self) -> None:
        try:
            while self._notices:
                text = self._notices.popleft()
                try:
                    await self.say(text)
                except Exception as exc:  # a surface failure: this notice only
                    log.warning("could not tell %s an agent notice: %r", self.key, exc)
        finally:
            self._telling = False

    @property
    def idle(self) -> bool:
        """No turn running or waiting, no command answering (and so no approval pending: one
        is only asked for within a turn)."""
        return not self.running and not self.queue and self._holds == 0

    @contextmanager
    def held(self) -> Iterator[None]:
        """Around a command: the conversation is in use, so it is not released meanwhile."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            self.idle_since = time.monotonic()

    def release(self) -> None:
        """The app forgets this idle conversation: let go of its session objects. The agent
        keeps the session; the next message's runner takes it up again."""
        # what the app keeps of this conversation for its next runner
        self._known_commands, self._known_usage = self.agent_commands, self.usage
        self.sessions.release()

    async def say(self, text: str) -> None:
        await self.services.deliver(self.surface, self.key, text)

    async def submit(self, inbound: Inbound) -> anyio.Event:
        done = inbound.handled or anyio.Event()
        if len(self.queue) >= self.services.settings.queue_limit:
            await self.say("Too many messages are waiting; send this again after the reply.")
            done.set()
            return done
        # Journalled while it waits (written before it joins the queue, so the turn that takes it
        # always finds the entry to close): a crash meanwhile costs the reply being written,
        # not this message, which whoever adopts the journal sends on.
        journal_id = await self._journal_waiting(inbound) if self.running else ""
        self.queue.append(_Queued(inbound, done, journal_id))
        if self.running:
            # Once the reply is out the turn only tidies up, and this message goes next at once:
            # "queued" would then read as if the answer were still coming.
            if not self._answered:
                await self.say("Queued; it goes to the agent when the current reply is done.")
        else:
            self.running = True
            self._idle = anyio.Event()
            self.services.spawn(self._work)
        return done

    async def _work(self) -> None:
        release_agent: Callable[[], None] | None = None
        try:
            while self.queue:
                batch = [self.queue.popleft()]
                while self.queue and self.queue[0].inbound.user == batch[0].inbound.user:
                    batch.append(self.queue.popleft())
                if release_agent is None:
                    # After the first batch is taken, not before: a message that arrives while
                    # the agent is looked up goes in the next turn, as it would mid-turn.
                    release_agent = await self._hold_agent()
                self.turn_id = new_turn_id()
                self._answered = False
                self._waiting_ids = [queued.journal_id for queued in batch if queued.journal_id]
                try:
                    with anyio.CancelScope() as scope:
                        self._turn_scope = scope
                        await self._turn([queued.inbound for queued in batch])
                except LeaseLost:  # another replica serves the conversation now: say nothing
                    log.warning("%s: turn %s stopped: the lease moved", self.key, self.turn_id)
                except Exception as exc:  # e.g. the surface failed delivering: this turn only
                    self.log_fault(exc, "delivering a reply")
                    await self._tell_fault(exc)
                finally:
                    self._turn_scope = None
                    with anyio.CancelScope(shield=True):
                        await self._close_waiting()  # also for a turn that ended early
                    for queued in batch:
                        queued.done.set()
        finally:  # a crash never leaves the conversation busy
            if release_agent is not None:
                release_agent()
            self.running = False
            self.idle_since = time.monotonic()
            for queued in self.queue:
                queued.done.set()
            self.queue.clear()
            if self._idle is not None:
                self._idle.set()

    async def _hold_agent(self) -> Callable[[], None]:
        """The conversation's agent is in use until its queue ends: the pool stops it neither as
        idle nor for room, also between a turn taking it and prompting it."""
        try:
            target = await self.sessions.target()
        except Exception:  # the turn reads it again, where a turn's faults are told
            return lambda: None
        return self.services.hold_agent(target)

    async def wait_idle(self) -> None:
        """Return once no turn runs or waits here (at once when none does)."""
        if self.running and self._idle is not None:
            await self._idle.wait()

    async def _turn(self, batch: list[Inbound]) -> None:
        if not await self._may_use_project(batch[0].user):
            return
        intake = await self._take_in(batch)
        if intake is None:
            return  # every file was refused (and said so), and there was nothing else
        requester = self.last_requester = batch[0].user
        services = self.services
        self.turn_started = time.monotonic()
        async with (
            self._journalled(requester) as turn_id,
            services.open_reply(self.surface, self.key) as reply,
        ):
            output = _ChatOutput(self, reply, requester)
            self._live_extras(output)
            notice = ""
            # for /metrics: bounded labels only
            outcome: str = ANSWERED
            error: type[BaseException] | None = None
            try:
                try:
                    stats = await self._run(intake, output)
                except AcpPromptBusy:
                    # the agent still runs an earlier prompt: a fresh session, replayed once
                    await self.sessions.forget()
                    stats = await self._run(intake, output)
                if stats.refusal is not None:
                    outcome = REFUSED
                    notice = refusal_card_text(stats.refusal, output.text)
                else:
                    if stats.stop_reason == STOP_REASON_CANCELLED:
                        outcome = STOPPED
                    notice = stop_notice(stats)
            except (*AGENT_ERRORS, ConfigError) as exc:
                outcome, error = AGENT_ERROR, type(exc)
                if isinstance(exc, AcpProcessDied | AcpRuntimeError):
                    self.sessions.drop()
                if isinstance(exc, AcpGateViolation):
                    # the next message loads the session again, which puts it back in the mode
                    # that asks (acp's gate, confirmed by the agent) or refuses the agent
                    self.sessions.drop()
                    await audit_violation(services.audit, self.key, requester.id, exc)
                notice = valid_text(str(exc))  # may quote the agent
            except anyio.get_cancelled_exc_class():
                services.metrics.turn_ended(SHUTDOWN, time.monotonic() - output.started)
                self._end_live_extras(output)
                with anyio.CancelScope(shield=True):
                    await services.finish_reply(
                        reply,
                        self.key,
                        join_paragraphs(output.text, SHUTDOWN_NOTE),
                        turn_id=turn_id,
                    )
                raise
            except Exception as exc:  # a fault of ours ends this turn, not the process
                self.log_fault(exc, "answering")
                outcome, error = FAULT, type(exc)
                notice = fault_sentence(exc)
            self._end_live_extras(output)
            final = join_paragraphs(
                join_paragraphs(output.text, notice)
                or "The agent finished without writing a reply.",
                self._turn_footer(output),
            )
            final, whole = self._as_file(final)
            await services.finish_reply(reply, self.key, final, turn_id=turn_id)
            services.metrics.turn_ended(outcome, time.monotonic() - output.started, error)
            self._answered = True
            await self._after_final(output, whole)

    # ---- what a turn shows besides the agent's text ----------------------------------------

    def _live_extras(self, output: _ChatOutput) -> None:
        """The elapsed-time ticker, and the Stop button where the live message can carry one.
        (A live preview that is a draft bubble, Telegram's private chats, cannot: the surface
        leaves the button out there, and /stop is the way.)"""
        self.services.spawn(output.tick)
        caps = self.surface.capabilities
        if caps.message_buttons and caps.can_edit:
            self.stop_token = f"{STOP_TOKEN_PREFIX}{uuid.uuid4().hex}"
            output.reply.set_buttons([Choice(self.stop_token, "Stop", "danger")])

    def _end_live_extras(self, output: _ChatOutput) -> None:
        output.stop_ticking()
        self.stop_token = ""  # a press from now on finds the turn over

    def _turn_footer(self, output: _ChatOutput) -> str:
        """The lines under the answer: a /compact suggestion when the context crossed 80% or 90%
        (once per crossing), then the tools used and the context and cost, one line each. (The
        prompt result's `usage` counts the turn's tokens but not the window they fill, so the
        context share comes from the session's `usage_update`s.)"""
        settings = self.services.settings
        usage = self.usage
        percent = context_percent(usage)
        level = compact_level(percent)
        hint = ""
        if level > self.compact_told:
            hint = compact_hint(level, self.surface.capabilities.command_prefixes[0])
        if percent is not None:  # unknown context use leaves what was said in force
            self.compact_told = level
        lines = [
            output.progress.tool_summary() if settings.tool_summary else "",
            usage_footer(usage),
        ]
        return join_paragraphs(hint, "\n".join(line for line in lines if line))

    def _as_file(self, final: str) -> tuple[str, OutgoingFile | None]:
        """A reply longer than `reply_file_after` messages, where the surface takes uploads, is
        a short summary here and the whole reply as a .md file after it."""
        after = self.services.settings.reply_file_after
        caps = self.surface.capabilities
        if not after or not caps.max_upload_bytes:
            return final, None
        if len(split_message(final, caps.max_chars, caps.count)) <= after:
            return final, None
        summary, whole = reply_as_file(final)
        if len(whole.data) > caps.max_upload_bytes:
            return final, None
        return summary, whole

    async def _after_final(self, output: _ChatOutput, whole: OutgoingFile | None) -> None:
        """After the answer is out: the long reply's file, the agent's files, and the agent's
        command menu. Nothing here can undo the answer: a failure is a line, or a log line."""
        notes: list[str] = []
        if whole is not None:
            try:
                await self.surface.send_file(self.key, whole)
            except SurfaceError as exc:
                log.warning("%s: the reply as a file was refused: %s", self.key, exc)
                # the summary alone would lose the answer
                said = "The full reply could not be attached; here it is as text."
                await self.say(join_paragraphs(said, whole.data.decode()))
        if output.files:
            try:
                workspace = (await self.sessions.target()).spec.workspace
                notes = await deliver_files(self.surface, self.key, output.files, workspace)
            except Exception as exc:  # a fault of ours: the files, not the turn
                self.log_fault(exc, "delivering the agent's files")
                notes = [fault_sentence(exc)]
        if notes:
            await self.say("\n".join(notes))
        self.sync_agent_menu()

    def sync_agent_menu(self) -> None:
        """Put the agent's commands into the surface's own menu for this conversation when
        the list changed: in a task of the app's (never on the frame reader's stack), one at a
        time, a failure logged and tried again after the next turn."""
        session = self.sessions.current
        if not self.surface.capabilities.agent_menus or session is None:
            return
        self._menu_wanted = session.state.commands
        if self._menu_wanted != self.menu_shown and not self._menu_syncing:
            self._menu_syncing = True
            self.services.spawn(self._sync_menu)

    async def _sync_menu(self) -> None:
        try:
            while self._menu_wanted != self.menu_shown:
                wanted = self._menu_wanted
                menu = [
                    MenuCommand(
                        ellipsize(command.name, MENU_NAME_CHARS),
                        ellipsize(" ".join(command.description.split()), MENU_TEXT_CHARS),
                        ellipsize(" ".join(command.hint.split()), MENU_TEXT_CHARS),
                    )
                    for command in wanted[:MENU_LIMIT]
                ]
                try:
                    with anyio.fail_after(self.services.settings.request_timeout):
                        await self.surface.agent_command_menu(self.key, menu)
                except Exception as exc:  # the menu is a convenience; /help lists them too
                    log.warning("could not update %s's agent command menu: %r", self.key, exc)
                    return
                self.menu_shown = wanted
        finally:
            self._menu_syncing = False

    async def _may_use_project(self, user: UserRef) -> bool:
        """A conversation that landed in a project (its place's, or the default) is only worked
        on by the people that project is open to; the rest are told, without its name."""
        target = await self.sessions.target()
        if target.project.may_use(self.services.access, self.key.surface, user.id):
            return True
        await self.services.audit.refused(
            self.key.surface, user.id, "project", project=target.project.name
        )
        prefix = self.surface.capabilities.command_prefixes[0]
        await self.say(
            "This conversation works in a project you may not use; "
            f"{prefix}project lists the ones you may."
        )
        return False

    @asynccontextmanager
    async def _journalled(self, requester: UserRef) -> AsyncIterator[str]:
        """The turn is in the store's journal while it runs, so a restart after the process died
        mid-turn can tell the person (the app does so at start-up). Its final text normally
        closes it (`finish_reply(turn_id=...)`); closing again here covers a turn that ended
        without one, which no restart should report as cut off."""
        replica = self.services.replica
        turn = JournalEntry(self.turn_id, self.key, requester.id, time.time(), replica)
        await self.services.store.journal_open(turn, JOURNAL_TTL)
        await self._close_waiting()  # the turn's own entry covers its messages from now on
        try:
            yield turn.turn_id
        finally:
            with anyio.CancelScope(shield=True):  # bounded by the store's busy timeout
                try:
                    await self.services.store.journal_close(turn.turn_id)
                except StoreFull as exc:  # the turn is told or answered; no room to record it
                    report_store_full(exc, "closing a turn")

    async def _journal_waiting(self, inbound: Inbound) -> str:
        entry = JournalEntry(
            f"q-{uuid.uuid4().hex[:16]}",
            self.key,
            inbound.user.id,
            time.time(),
            self.services.replica,
            encode_event(inbound, 0),
        )
        await self.services.store.journal_open(entry, JOURNAL_TTL)
        return entry.turn_id

    async def _close_waiting(self, ids: Sequence[str] | None = None) -> None:
        """Close the journal entries of waiting messages now taken (or dropped)."""
        if ids is None:
            ids, self._waiting_ids = self._waiting_ids, []
        for journal_id in ids:
            try:
                await self.services.store.journal_close(journal_id)
            except StoreError as exc:  # it is sent on after a crash; one duplicate at worst
                log.warning("%s: could not close journal entry %s: %s", self.key, journal_id, exc)

    def log_fault(self, exc: Exception, doing: str, **crumbs: str) -> None:
        """Log a fault in this conversation with its breadcrumbs: the agent, and the turn while
        one runs."""
        session = self.sessions.current
        runtime = session.client.runtime if session is not None else None
        turn = self.turn_id if self.running else ""
        log_fault(exc, doing, self.key, runtime, **crumbs, turn=turn)

    async def _tell_fault(self, exc: Exception) -> None:
        """Best effort: the surface that just failed may fail again (already logged once)."""
        try:
            with anyio.move_on_after(self.services.settings.request_timeout):
                if told_without_store(exc):  # the ledger is what failed
                    async with self.services.open_reply(self.surface, self.key) as reply:
                        await reply.finish(fault_sentence(exc))
                else:
                    await self.say(fault_sentence(exc))
        except Exception as again:
            log.warning("could not tell %s about the fault: %r", self.key, again)

    async def _take_in(self, batch: list[Inbound]) -> Intake | None:
        """The batch's text and files (`bot.attachments`); each refused file is said here."""
        limits = FileLimits.of(self.services.settings, self.surface.capabilities.max_download_bytes)
        intake = await take_in(
            [inbound.text for inbound in batch], [inbound.files for inbound in batch], limits
        )
        if intake.refusals:
            await self.say("\n".join(intake.refusals))
        return intake if intake.for_agent else None

    async def _run(self, intake: Intake, output: _ChatOutput) -> AcpPromptStats:
        session = await self.sessions.session()
        prompt = await prompt_for(
            intake, session.prompt_capabilities, session.client.runtime.workspace
        )
        return await run_turn(
            self.sessions,
            prompt,
            output,
            policy=self.services.policy,
            timeout=self.services.settings.prompt_timeout,
        )

    async def stop(self) -> tuple[bool, int]:
        """/stop: cancel the running turn, drop the queue and pending approvals. Returns whether
        a turn was cancelled and how many queued messages were dropped."""
        dropped = len(self.queue)
        waiting = [queued.journal_id for queued in self.queue if queued.journal_id]
        for queued in self.queue:
            queued.done.set()
        self.queue.clear()
        await self._close_waiting(waiting)
        session = self.sessions.current
        if not self.running or session is None or not session.busy:
            return False, dropped
        await session.cancel()
        return True, dropped

    def lose(self) -> list[tuple[Inbound, str]]:
        """Another replica took this conversation: the turn is cancelled; it writes nothing
        more (the store refuses its writes, `LeaseLost`). Returns the messages that were waiting
        (each with its journal entry) for the app to hand on to the new holder."""
        waiting = [(queued.inbound, queued.journal_id) for queued in self.queue]
        for queued in self.queue:
            queued.done.set()
        self.queue.clear()
        self.hard_stop()
        self.release()
        return waiting

    def hard_stop(self) -> None:
        """Cancel the running turn outright (shutdown, once `stop` had its chance); the turn
        still delivers its partial output."""
        if self._turn_scope is not None:
            self._turn_scope.cancel()
