"""`ChatRunner`: one conversation, one turn at a time. It queues what arrives mid-turn (a burst
from one person becomes one turn), hands each batch to a `Turn` (bot/turn.py: take-in, journal,
the retry ladder, the final and what follows it), and keeps a fault to the turn it happened in.

It depends on `ConversationServices` (the agent pool, replies, the store, approvals), never on
the app that implements them. A runner lives while its conversation is in use: the app releases
one that has been `idle` for a while (`release` lets go of its session objects, the agent keeps
the session) and builds a new one for the next message."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from acp import AgentCommand, UsageInfo
from bot.agent_menu import AgentMenu
from bot.agent_notices import AgentNotices
from bot.agent_sessions import ConversationSessions
from bot.busy import BusyControl, Waiting
from bot.faults import fault_sentence, log_fault, new_turn_id, told_without_store
from bot.progress import TICK_INTERVAL as PROGRESS_TICK
from bot.services import ConversationServices
from bot.store import LeaseLost
from bot.subagent_stop import SubagentStops
from bot.turn import Turn
from bot.turn_journal import TurnJournal
from bot.turn_output import LiveOutput
from surfaces.base import ConversationKey, Inbound, Surface, UserRef

log = logging.getLogger(__name__)


class ChatRunner:
    """One conversation: one turn at a time; messages arriving mid-turn wait in a bounded queue
    (a burst from one person becomes one turn), unless steered into the turn or sent ahead of
    the queue (`busy`, bot/busy.py); never a second concurrent prompt."""

    def __init__(
        self, services: ConversationServices, surface: Surface, key: ConversationKey
    ) -> None:
        self.services = services
        self.surface = surface
        self.key = key
        prefix = surface.capabilities.command_prefixes[0]
        notices = AgentNotices(services, key, prefix, self.say, lambda: self.last_requester)
        self.sessions = ConversationSessions(services, key, self.say, notices.heard)
        self.journal = TurnJournal(services, key)
        self.menu = AgentMenu(services, surface, key)
        self.queue: deque[Waiting] = deque()
        self.busy = BusyControl(self)
        self.stops = 0  # how many times /stop dropped the queue (a steer in flight checks it)
        self.running = False
        self._idle: anyio.Event | None = None  # set when the work `running` stands for ends
        self._turn: Turn | None = None  # the running (or last) turn of this queue
        self.turn_started = 0.0
        self.turn_id = ""  # names the running (or last) turn in log lines
        # What a released runner knew of the agent's state (the app hands it on); the live
        # session's state wins once it has any.
        self._known_commands: tuple[str, ...] = ()
        self._known_usage: UsageInfo | None = None
        self.last_requester: UserRef | None = None  # whose message started the latest turn
        self._turn_scope: anyio.CancelScope | None = None
        self._holds = 0  # commands answering here right now (`held`)
        self.idle_since = time.monotonic()  # when the last turn or command here ended
        self.stop_token = ""  # the running turn's Stop button, where the surface shows one
        self.subagent_stops = SubagentStops()  # its subagents' own, beside it
        self.tick_interval = PROGRESS_TICK  # how often a quiet turn refreshes its elapsed time
        self.compact_told = 0  # the context threshold last suggested /compact for

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

    @property
    def menu_shown(self) -> tuple[AgentCommand, ...]:
        """The agent's commands the surface's menu shows here (handed on across a release)."""
        return self.menu.shown

    @menu_shown.setter
    def menu_shown(self, shown: tuple[AgentCommand, ...]) -> None:
        self.menu.shown = shown

    def sync_agent_menu(self) -> None:
        """Put the session's command list into the surface's menu, when it changed."""
        session = self.sessions.current
        if session is not None:
            self.menu.sync(session.state.commands)

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
        queued = await self.enqueue(inbound, done)
        if queued is None:
            done.set()
        elif queued.journal_id and self.answering:
            # Once the reply is out the turn only tidies up, and this message goes next at once:
            # "queued" would then read as if the answer were still coming.
            await self.busy.arrived(queued)
        return done

    async def enqueue(self, inbound: Inbound, done: anyio.Event | None = None) -> Waiting | None:
        """Queue the message (a turn starts when none runs); None when the queue is full (said)."""
        if len(self.queue) >= self.services.settings.queue_limit:
            await self.say("Too many messages are waiting; send this again after the reply.")
            return None
        # Journalled while it waits (written before it joins the queue, so the turn that takes it
        # always finds the entry to close): a crash meanwhile costs the reply being written,
        # not this message, which whoever adopts the journal sends on.
        journal_id = await self.journal.waiting(inbound) if self.running else ""
        queued = Waiting(inbound, done or anyio.Event(), journal_id)
        self.queue.append(queued)
        if not self.running:
            self._start()
        return queued

    def put_ahead(self, waiting: Waiting) -> None:
        """`waiting` goes next, alone, after any other message put ahead (an interrupt, or a
        steer the agent wants as a prompt); it keeps its journal entry until a turn takes it."""
        if waiting in self.queue:
            self.queue.remove(waiting)
        waiting.ahead = True
        at = next((i for i, each in enumerate(self.queue) if not each.ahead), len(self.queue))
        self.queue.insert(at, waiting)
        if not self.running:
            self._start()

    def put_back(self, waiting: Waiting, at: int) -> None:
        """`waiting`, taken out of the queue a moment (a steer the agent did not take), back
        at its place."""
        self.queue.insert(at, waiting)
        if not self.running:
            self._start()

    def _start(self) -> None:
        self.running = True
        self._idle = anyio.Event()
        self.services.spawn(self._work)

    @property
    def answering(self) -> bool:
        """A turn runs here and its reply is still to come."""
        return self.running and (self._turn is None or not self._turn.answered)

    @property
    def live_output(self) -> LiveOutput | None:
        """The running turn's live reply while it answers (None before it opens one)."""
        turn = self._turn
        return turn.output if self.answering and turn is not None else None

    async def _work(self) -> None:
        release_agent: Callable[[], None] | None = None
        try:
            while self.queue:
                batch = [self.queue.popleft()]
                while (
                    not batch[0].ahead  # one put ahead goes alone
                    and self.queue
                    and self.queue[0].inbound.user == batch[0].inbound.user
                ):
                    batch.append(self.queue.popleft())
                for queued in batch:
                    self.busy.sent_on(queued)
                if release_agent is None:
                    # After the first batch is taken, not before: a message that arrives while
                    # the agent is looked up goes in the next turn, as it would mid-turn.
                    release_agent = await self._hold_agent()
                self.turn_id = new_turn_id()
                waiting = [queued.journal_id for queued in batch if queued.journal_id]
                turn = self._turn = Turn(
                    self, [queued.inbound for queued in batch], self.turn_id, waiting
                )
                try:
                    with anyio.CancelScope() as scope:
                        self._turn_scope = scope
                        await turn.run()
                except LeaseLost:  # another replica serves the conversation now: say nothing
                    log.warning("%s: turn %s stopped: the lease moved", self.key, self.turn_id)
                except Exception as exc:  # e.g. the surface failed delivering: this turn only
                    self.log_fault(exc, "delivering a reply")
                    await self._tell_fault(exc)
                finally:
                    self._turn_scope = None
                    with anyio.CancelScope(shield=True):
                        await turn.close_waiting()  # also for a turn that ended early
                    for queued in batch:
                        queued.done.set()
        finally:  # a crash never leaves the conversation busy
            if release_agent is not None:
                release_agent()
            self.running = False
            self._turn = None
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

    async def stop(self) -> tuple[bool, int]:
        """/stop: cancel the running turn, drop the queue and pending approvals. Returns whether
        a turn was cancelled and how many queued messages were dropped."""
        dropped = len(self.queue)
        self.stops += 1
        waiting = [queued.journal_id for queued in self.queue if queued.journal_id]
        for queued in self.queue:
            queued.done.set()
        self.busy.dropped(list(self.queue), self.surface.capabilities.command_prefixes[0])
        self.queue.clear()
        await self.journal.close(waiting)
        session = self.sessions.current
        if not self.running or session is None or not session.busy:
            return False, dropped
        self.services.elicitations.decline_open(self.key)
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
