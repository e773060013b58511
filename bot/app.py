"""`BotApp`: the composition root. One task group owns the agent runtime pool, every surface and
every running turn; inbound events are checked (access, de-duplication), then routed to a
command or to the conversation's runner. The app provides the runners' services
(`ConversationServices`: the agent pool, replies through the ledger, the task group) and never
runs a turn itself.

Memory follows the live conversations, not every conversation ever seen: a conversation idle
for `RELEASE_AFTER` seconds (no turn running or queued, no command answering, so no approval
pending) is released: its runner goes, and its agent session objects with it, while the agent
keeps the session. Its next message builds a new runner that takes the same agent session up
again (no session/load while that agent runs; the stored binding resumes it after a respawn, as
for any conversation). What /status and /help show from the agent (context used, the agent's
commands) is carried over for the most recently released `MEMO_LIMIT` conversations."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from acp import (
    AGENT_ERRORS,
    AcpClient,
    AcpRuntime,
    AgentCommand,
    PoolKey,
    RuntimeOpener,
    RuntimePool,
    UsageInfo,
    open_runtime,
    pool_key,
)
from bot.access import AccessPolicy
from bot.agent_sessions import AgentPlans, AgentTarget, client_preparer
from bot.audit import AuditLog
from bot.chat_runner import STOP_TOKEN_PREFIX, ChatRunner
from bot.cluster import (
    MAX_HOPS,
    Lease,
    RelayedEvent,
    SurfaceLeases,
    conversation_lease,
    decode_event,
    encode_event,
    open_cluster,
)
from bot.commands import (
    PROJECT_TOKEN_PREFIX,
    STOP,
    ParsedCommand,
    command_menu,
    parse_command,
    project_pressed,
    run_command,
)
from bot.faults import fault_sentence, log_fault
from bot.http_server import HttpServer
from bot.ladder import RetryPolicy
from bot.metrics import LiveState, Metrics
from bot.notices import RESTART_NOTICE
from bot.ops_view import OpsView
from bot.permissions import ApprovalBroker
from bot.projects import build_projects
from bot.reply import ReplyStream, open_reply
from bot.runtime_tuning import tuned_for_serving
from bot.store import DeliveryEntry, JournalEntry, StateStore, StoreError
from config import Settings, valid_text
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, IncomingFile, Surface
from surfaces.lanes import Lanes

log = logging.getLogger(__name__)


# Stopping must finish within 10 s: turns get this long to end with their partial output, then
# are cut (1 s), then agents get their shutdown ladder (about 4 s at worst).
SHUTDOWN_BUDGET = 4.0

# A conversation idle this long is released (checked about every RELEASE_AFTER / 4 seconds). A
# released conversation behaves as before, so this is short: a busy bot keeps only its last few
# seconds of conversations; a burst of messages, or a command right after a reply, still finds its
# runner (no store read to rebuild it).
RELEASE_AFTER = 2.0
# /readyz's store check gives up after this long (a probe must answer quickly).
READY_STORE_TIMEOUT = 2.0
# How long one read of relayed events waits (also the pause after a failed read).
RELAY_WAIT = 1.0
CONVERSATION_HELD = (
    "Another Switchboard replica is serving this conversation and did not take your message; "
    "send it again in a minute."
)
# A stranger's events are audited once per this many seconds per person, and this many
# strangers remembered: a group's chatter cannot flood the audit log.
STRANGER_AUDIT_EVERY = 3600.0
STRANGERS_REMEMBERED = 10_000
# Released conversations whose agent-reported state (/status's context, /help's agent commands)
# is kept; past this, the oldest show what a restarted bot shows until their next turn.
MEMO_LIMIT = 10_000

# What a released conversation's runner knew from the agent: its commands and context usage, and
# what it had shown of them (the native menu, the context threshold last told), so a rebuilt
# runner neither repeats a menu update nor a /compact hint.
_Memo = tuple[tuple[str, ...], UsageInfo | None, tuple[AgentCommand, ...], int]


class BotApp:
    """The running bot: routes each event to a command or a conversation's `ChatRunner`, and
    gives every runner its services (this class implements `ConversationServices`)."""

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        access: AccessPolicy,
        *,
        opener: RuntimeOpener = open_runtime,
        release_after: float = RELEASE_AFTER,
    ) -> None:
        self.settings = settings
        self.store = store
        self.access = access
        self.policy = RetryPolicy.from_settings(settings.retry)
        self.audit = AuditLog(store, keep_days=settings.audit_days)
        self.metrics = Metrics()
        self.approvals = ApprovalBroker(
            store, access, timeout=settings.approval_timeout, audit=self.audit
        )
        # Every project's every agent planned now: a bad entry stops the start, not a turn.
        self.plans = AgentPlans(settings, build_projects(settings))
        self.plans.check_all()
        self.spec, self.gate = self.plans.default.spec, self.plans.default.gate
        self.runners: dict[ConversationKey, ChatRunner] = {}  # the live conversations
        self._memos: OrderedDict[ConversationKey, _Memo] = OrderedDict()
        self._release_after = release_after
        self._surfaces: dict[str, Surface] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._pool: RuntimePool[AcpClient] | None = None
        self._opener = opener  # how agents start: a process by default
        # Conversations whose turn runs or waits, by the pool key of their agent: the pool stops
        # none of these agents (a turn between taking its agent and prompting it looks idle).
        self._held: Counter[PoolKey] = Counter()
        # What the last start of the default project's agent ended with ("": it started; None:
        # not started yet), for /readyz: a probe never spawns an agent.
        self.agent_start_failure: str | None = None
        self.http: HttpServer | None = None  # while serving, unless SWITCHBOARD_HTTP__PORT=off
        # Strangers audited lately (a group's every message from them would flood the log).
        self._strangers_audited: OrderedDict[tuple[str, str], float] = OrderedDict()
        # Replicas (bot/cluster.py): the conversations this replica serves are those whose
        # lease it holds, one lease per live runner; their writes are fenced with it.
        self.cluster = open_cluster(settings.replica_id, settings.lease_ttl, store)
        self.replica = self.cluster.replica
        self._leases: dict[ConversationKey, Lease] = {}
        self._stale: set[ConversationKey] = set()  # leases that moved here: sessions reload
        self._lost: dict[ConversationKey, Lease] = {}  # taken by another while a turn ran
        self._alive: set[str] = set()  # the replicas alive at the last heartbeat
        self._beating_since: float | None = None  # the first of the heartbeats since a failure
        self._orphans_due = False  # a replica died: adopt what it left
        self._starting = True  # until the first adoption, at start-up, is done
        self._relayed: Lanes[ConversationKey, RelayedEvent] = Lanes(
            self._accept_relayed, failure="the bot failed on a relayed event in %s", logger=log
        )
        fenced = getattr(store, "inner", store)
        if self.cluster.shared and hasattr(fenced, "fence_of"):
            fenced.fence_of = self._fence_of

    # ---- ConversationServices: what runners use -----------------------------------------
    def spawn(self, func: Callable[[], Coroutine[Any, Any, None]]) -> None:
        assert self._tg is not None, "BotApp is not running"
        self._tg.start_soon(func)

    async def client(
        self,
        target: AgentTarget | None = None,
        *,
        say: Callable[[str], Awaitable[None]] | None = None,
    ) -> AcpClient:
        assert self._pool is not None, "BotApp is not running"
        spec = (target or self.plans.default).spec
        default = pool_key(spec) == pool_key(self.plans.default.spec)
        try:
            client = await self._pool.get(spec, on_wait=self._wait_line(say))
        except AGENT_ERRORS as exc:
            if default:
                self.agent_start_failure = type(exc).__name__
            raise
        if default:
            self.agent_start_failure = ""
        return client

    def hold_agent(self, target: AgentTarget | None = None) -> Callable[[], None]:
        key = pool_key((target or self.plans.default).spec)
        self._held[key] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
                if self._pool is not None:
                    self._pool.notify_idle()

        return release

    async def discard_client(self, target: AgentTarget | None = None) -> None:
        if self._pool is not None:
            self.metrics.respawns.inc()  # only the ladder discards: a dead agent, respawned
            await self._pool.discard((target or self.plans.default).spec)

    @asynccontextmanager
    async def open_reply(
        self, surface: Surface, key: ConversationKey
    ) -> AsyncIterator[ReplyStream]:
        pacer = surface.capabilities.pacing.for_chat(key.chat)  # the surface's own pacing
        with pacer.held():
            async with open_reply(surface, key, pacer) as reply:
                yield reply

    async def finish_reply(
        self, reply: ReplyStream, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        """The final text always reaches the person: it is in the ledger until delivered, and
        a restart re-sends what a crash cut off. With `turn_id`, this text answers that journalled
        turn, which leaves the journal in the same store write."""
        text = valid_text(text)  # the last defence: every final text can be encoded
        entry = DeliveryEntry(uuid.uuid4().hex, key, text, time.time(), replica=self.replica)
        await self.store.ledger_put(entry, closes_turn=turn_id)
        if await reply.finish(text):
            await self.store.ledger_done(entry.entry_id)
        else:
            await self.store.ledger_attempted(entry.entry_id)

    async def deliver(
        self, surface: Surface, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        async with self.open_reply(surface, key) as reply:
            await self.finish_reply(reply, key, text, turn_id=turn_id)

    # ---- inbound --------------------------------------------------------------------------
    def runner(self, surface: Surface, key: ConversationKey) -> ChatRunner:
        runner = self.runners.get(key)
        if runner is None:
            runner = self.runners[key] = ChatRunner(self, surface, key)
            if key in self._stale:  # served elsewhere since this replica last did
                self._stale.discard(key)
                runner.sessions.stale = True
                self._memos.pop(key, None)
            memo = self._memos.pop(key, None)
            if memo is not None:
                runner.agent_commands, runner.usage, runner.menu_shown, runner.compact_told = memo
        return runner

    def release_idle(self, now: float) -> None:
        """Forget the conversations idle for `release_after` seconds (see the module's doc)."""
        cutoff = now - self._release_after
        idle = [
            key
            for key, runner in self.runners.items()
            if runner.idle and runner.idle_since <= cutoff
        ]
        for key in idle:
            runner = self.runners.pop(key)
            runner.release()
            self._let_go(key)
            if runner.agent_commands or runner.usage is not None or runner.menu_shown:
                self._memos[key] = (
                    runner.agent_commands,
                    runner.usage,
                    runner.menu_shown,
                    runner.compact_told,
                )
                if len(self._memos) > MEMO_LIMIT:
                    self._memos.popitem(last=False)

    async def _release_loop(self) -> None:
        while True:
            await anyio.sleep(self._release_after / 4)
            self.release_idle(time.monotonic())

    async def on_event(self, event: Inbound | ChoiceAnswer) -> None:
        """Accept one event. Returns when it is queued or answered, not when its reply is done."""
        queued = False
        try:
            queued = await self._accept(event)
        except Exception as exc:  # a fault of ours: this event only, the adapter goes on
            await self._event_fault(event, exc)
        finally:
            # A queued message's runner signals when its turn is done; anything else is done now.
            if not queued and isinstance(event, Inbound) and event.handled is not None:
                event.handled.set()

    async def _accept(
        self, event: Inbound | ChoiceAnswer, relayed: RelayedEvent | None = None
    ) -> bool:
        """Handle the event; True when a message was queued for a turn. A `relayed` event was
        claimed by the replica that received it."""
        surface = self._surfaces[event.key.surface]
        if not self.access.may_chat(event.key.surface, event.user):
            await self._audit_stranger(event)
            return False  # strangers get nothing back
        if relayed is None and not await self.store.claim_event(
            f"{event.key.surface}:{event.event_id}", self.settings.dedupe_ttl
        ):
            log.info("dropping a redelivered event %s", event.event_id)
            return False
        try:
            if not await self._take_conversation(event, relayed.hops if relayed else 0):
                return False  # handed to the replica serving this conversation
        except ConversationHeld as held:
            log.warning("%s", held)
            await self.deliver(surface, event.key, CONVERSATION_HELD)
            return False
        self.runner(surface, event.key)  # one runner per lease: its release lets the lease go
        if relayed is not None and relayed.files and isinstance(event, Inbound):
            event = await self._with_relayed_files(surface, event, relayed)
        if isinstance(event, ChoiceAnswer):
            if event.token.startswith(STOP_TOKEN_PREFIX):
                await self._stop_pressed(surface, event)
            elif event.token.startswith(PROJECT_TOKEN_PREFIX):
                runner = self.runner(surface, event.key)
                with runner.held():
                    await project_pressed(runner, event)
            else:
                await self.approvals.answer(event)
            return False
        runner = self.runner(surface, event.key)
        parsed = parse_command(
            surface.capabilities.command_prefixes, event.text, runner.agent_commands
        )
        if parsed is not None and parsed.command.handler is not None:
            with runner.held():
                await run_command(runner, parsed, event.user)
            return False
        if parsed is not None:  # the agent's (/compact), however this surface spells it
            event = replace(event, text=f"/{parsed.command.name} {parsed.args}".rstrip())
        await runner.submit(event)  # everything else is prompt text as typed
        return True

    # ---- replicas (bot/cluster.py) ------------------------------------------------------------
    def _fence_of(self, key: ConversationKey) -> tuple[str, str] | None:
        lease = self._leases.get(key) or self._lost.get(key)
        return None if lease is None else (lease.name, str(lease.token))

    async def _take_conversation(self, event: Inbound | ChoiceAnswer, hops: int) -> bool:
        """True when this replica serves the event's conversation (it holds its lease, or took
        it now); False when the event was handed to the replica that holds it."""
        key = event.key
        if key in self._leases:
            return True
        name = conversation_lease(key)
        deadline = time.monotonic() + 2 * self.cluster.ttl
        while True:
            got = await self.cluster.acquire(name)
            if isinstance(got, Lease):
                self._leases[key] = got
                self._lost.pop(key, None)
                if got.moved:
                    self._stale.add(key)
                return True
            if hops < MAX_HOPS and await self.cluster.relay(got, encode_event(event, hops + 1)):
                log.info("handed event %s of %s to replica %s", event.event_id, key, got)
                self.metrics.relayed.inc()
                return False
            if time.monotonic() > deadline:
                raise ConversationHeld(key, got)
            # its holder is not alive (or the lease keeps moving): it expires within the TTL
            await anyio.sleep(self.cluster.ttl / 10)

    def _let_go(self, key: ConversationKey) -> None:
        lease = self._leases.pop(key, None)
        if lease is not None and self.cluster.shared:
            self.spawn(lambda: self._release_lease(lease))

    async def _release_lease(self, lease: Lease) -> None:
        try:
            await self.cluster.release(lease)
        except StoreError as exc:  # it expires by itself within the TTL
            log.warning("could not release lease %s: %s", lease.name, exc.reason)

    async def _with_relayed_files(
        self, surface: Surface, event: Inbound, relayed: RelayedEvent
    ) -> Inbound:
        """The relayed message's attachments, downloadable here again through this replica's
        adapter; those that cannot be are said to be left behind."""
        rebuild = getattr(surface, "file_from_ref", None)
        files: list[IncomingFile] = []
        for ref in relayed.files:
            file = (
                rebuild(ref.name, ref.mime, ref.size, ref.kind, ref.ref)
                if ref is not None and rebuild is not None
                else None
            )
            if isinstance(file, IncomingFile):
                files.append(file)
        left = len(relayed.files) - len(files)
        if left:
            await self.deliver(surface, event.key, _files_left(left))
        return replace(event, files=tuple(files))

    async def _accept_relayed(self, relayed: RelayedEvent) -> None:
        event = relayed.event
        if event.key.surface not in self._surfaces:
            log.warning("dropping an event relayed for surface %s, not run here", event.key.surface)
            return
        try:
            await self._accept(event, relayed)
        except Exception as exc:  # a fault of ours: this event only
            await self._event_fault(event, exc)

    async def _relay_loop(self) -> None:
        """Events other replicas handed to this one, each conversation's in order."""
        while True:
            # store calls are shielded: without this checkpoint a cancelled loop never ends
            await anyio.lowlevel.checkpoint()
            try:
                payloads = await self.cluster.relayed(RELAY_WAIT)
            except StoreError as exc:
                log.warning("cannot read relayed events: %s", exc.reason)
                await anyio.sleep(RELAY_WAIT)
                continue
            self._file_relayed(payloads)

    def _file_relayed(self, payloads: Sequence[str]) -> None:
        for payload in payloads:
            relayed = decode_event(payload)
            if relayed is not None:
                self._relayed.put(relayed.event.key, relayed)

    async def _beat_loop(self) -> None:
        """The heartbeat, every third of the TTL: renews this replica's leases (a lost one stops
        its conversation's turn without writing), notices replicas that died (what they left
        is adopted), and adopts what is still unhandled."""
        while True:
            await self._beat()
            if self._orphans_due:
                await self._adopt_orphans()
            await anyio.sleep(self.cluster.ttl / 3)

    async def _beat(self) -> None:
        leases = list(self._leases.values())
        try:
            lost = await self.cluster.beat(leases)
            alive = set(await self.cluster.alive())
            dead = await self.cluster.dead_replicas() if self.cluster.shared else []
        except StoreError as exc:  # the leases hold until the TTL; the next beat tries again
            log.warning("replica heartbeat failed: %s", exc.reason)
            self._beating_since = None
            return
        now = time.monotonic()
        if self._beating_since is None:
            self._beating_since = now
        # Right after this replica could not reach the store, every other replica looks dead
        # too until it has beaten again: nobody is taken for dead within a TTL of that.
        if now - self._beating_since < self.cluster.ttl:
            return self._drop_lost(lost)
        if self._alive - alive or dead:
            self._orphans_due = True
        self._alive = alive
        for replica in dead:
            try:
                payloads = await self.cluster.adopt(replica)
            except StoreError as exc:
                log.warning("could not adopt replica %s's events: %s", replica, exc.reason)
                continue
            log.warning(
                "replica %s stopped; adopting its %d relayed events", replica, len(payloads)
            )
            self.metrics.replicas_adopted.inc()
            self._file_relayed(payloads)
        self._drop_lost(lost)

    def _drop_lost(self, lost: set[str]) -> None:
        by_name = {lease.name: key for key, lease in self._leases.items()}
        for name in lost:
            key = by_name.get(name)
            if key is not None:
                self._lease_lost(key)

    def _lease_lost(self, key: ConversationKey) -> None:
        """Another replica took the conversation (this one could not renew in time): its turn
        stops, writing nothing more (the store fences the writes); the runner goes."""
        log.warning("lost the lease of %s to another replica; stopping its turn", key)
        self.metrics.leases_lost.inc()
        lease = self._leases.pop(key, None)
        runner = self.runners.pop(key, None)
        if runner is None or lease is None:
            return
        # Its turn's last writes (the partial reply as it stops) go out under the old token,
        # so the store refuses them, until the runner is done.
        self._lost[key] = lease
        waiting = runner.lose()
        self.spawn(lambda: self._forget_lost(key, lease, runner))
        if waiting:
            self.spawn(lambda: self._hand_on(waiting))

    async def _hand_on(self, waiting: Sequence[tuple[Inbound, str]]) -> None:
        """Messages that were waiting here when another replica took their conversation go to
        that replica, in order."""
        for inbound, journal_id in waiting:
            try:
                if await self._take_conversation(inbound, 1):  # it came back to this replica
                    await self._accept(inbound, RelayedEvent(inbound, 1))
                if journal_id:
                    await self.store.journal_close(journal_id)
            except Exception as exc:  # a fault of ours: this message only
                await self._event_fault(inbound, exc)

    async def _forget_lost(self, key: ConversationKey, lease: Lease, runner: ChatRunner) -> None:
        await runner.wait_idle()
        if self._lost.get(key) is lease:
            del self._lost[key]

    def _orphaned(self, replica: str) -> bool:
        """An entry written by `replica` is nobody's now: at start-up, every entry of this
        replica's id (an earlier process; with one process, every entry), later those of
        replicas seen not alive."""
        if replica == self.replica or not self.cluster.shared:
            return self._starting
        # others' only once their death was seen (a TTL of heartbeats after start-up)
        return not self._starting and replica not in self._alive

    async def _adopt_orphans(self) -> None:
        """What dead replicas (or an earlier process) left: undelivered replies are sent again,
        cut-off turns told; each in its conversation, under its lease (so two replicas never
        both do one). What cannot be done now (the conversation held elsewhere) is tried at
        the next heartbeat."""
        self._orphans_due = False
        try:
            pending = [e for e in await self.store.ledger_pending() if self._orphaned(e.replica)]
            turns = [t for t in await self.store.journal_open_turns() if self._orphaned(t.replica)]
        except StoreError as exc:
            log.warning("cannot read what stopped replicas left: %s", exc.reason)
            self._orphans_due = True
            return
        for entry in pending:
            if entry.attempts < 5 and await self._adopt_conversation(entry.key):
                await self._redeliver_one(entry)
        for turn in turns:
            if not await self._adopt_conversation(turn.key):
                continue
            if turn.message:  # a message that was waiting behind the turn: sent on, in order
                await self._send_on(turn)
            else:
                await self._tell_cut_off(turn)

    async def _send_on(self, waiting: JournalEntry) -> None:
        relayed = decode_event(waiting.message)
        try:
            await self.store.journal_close(waiting.turn_id)  # its new turn journals it anew
        except StoreError as exc:
            log.warning("could not close waiting message %s: %s", waiting.turn_id, exc.reason)
            self._orphans_due = True
            return
        if relayed is not None:
            log.info("sending on a message a stopped process left waiting in %s", waiting.key)
            self._relayed.put(waiting.key, relayed)

    async def _adopt_conversation(self, key: ConversationKey) -> bool:
        surface = self._surfaces.get(key.surface)
        if surface is None:
            return False  # its surface does not run here: its replica, or a later start, will
        if key not in self._leases:
            try:
                got = await self.cluster.acquire(conversation_lease(key))
            except StoreError:
                self._orphans_due = True
                return False
            if not isinstance(got, Lease):
                self._orphans_due = True  # held by a live replica now; once it lets go
                return False
            self._leases[key] = got
            if got.moved:
                self._stale.add(key)
        self.runner(surface, key)  # released with its lease once idle
        return True

    def _task_group(self) -> anyio.abc.TaskGroup:
        assert self._tg is not None, "BotApp is not running"
        return self._tg

    async def _audit_stranger(self, event: Inbound | ChoiceAnswer) -> None:
        """A stranger's event, audited once per person and surface per STRANGER_AUDIT_EVERY."""
        who = (event.key.surface, event.user.id)
        now = time.monotonic()
        last = self._strangers_audited.get(who)
        if last is not None and now - last < STRANGER_AUDIT_EVERY:
            return
        self._strangers_audited[who] = now
        self._strangers_audited.move_to_end(who)
        if len(self._strangers_audited) > STRANGERS_REMEMBERED:
            self._strangers_audited.popitem(last=False)
        action = "press" if isinstance(event, ChoiceAnswer) else "message"
        await self.audit.refused(event.key.surface, event.user.id, "stranger", event=action)

    async def _stop_pressed(self, surface: Surface, press: ChoiceAnswer) -> None:
        """A live reply's Stop button: what /stop does, for the person who asked, approvers
        and admins; anyone else, or a press after the turn ended, is told why nothing happens."""
        runner = self.runners.get(press.key)
        if runner is None or not runner.stop_token or runner.stop_token != press.token:
            await self._tell_presser(surface, press, "That reply has already finished.")
            return
        requester = runner.last_requester
        requester_id = requester.id if requester is not None else ""
        if not self.access.may_approve(press.key.surface, press.user, requester_id):
            who = requester.label if requester is not None else "the person who asked"
            await self._tell_presser(surface, press, f"Only {who} or an approver can stop this.")
            log.info("refused a stop press from %s", press.user.id)
            await self.audit.refused(
                press.key.surface, press.user.id, "stop", requester=requester_id
            )
            return
        runner.stop_token = ""  # one press stops; a second finds the turn over
        with runner.held():
            await run_command(runner, ParsedCommand(STOP, ""))

    async def _tell_presser(self, surface: Surface, press: ChoiceAnswer, text: str) -> None:
        if press.notify is not None:
            await press.notify(text)
        else:  # no way to tell only them: the chat hears it
            await self.deliver(surface, press.key, text)

    async def _event_fault(self, event: Inbound | ChoiceAnswer, exc: Exception) -> None:
        runner = self.runners.get(event.key)
        if runner is not None:
            runner.log_fault(exc, "handling an event", event=event.event_id)
        else:
            log_fault(exc, "handling an event", event.key, None, event=event.event_id)
        surface = self._surfaces.get(event.key.surface)
        try:
            if surface is not None and self.access.may_chat(event.key.surface, event.user):
                with anyio.move_on_after(self.settings.request_timeout):
                    await self.deliver(surface, event.key, fault_sentence(exc))
        except Exception as again:  # already logged once; the surface may be what fails
            log.warning("could not tell %s about the fault: %r", event.key, again)

    # ---- lifecycle ------------------------------------------------------------------------
    async def serve(
        self,
        surfaces: Sequence[Surface],
        stop: anyio.Event,
        *,
        http: bool = False,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until every surface's input ends or `stop` is set, then wind down: running turns
        are cancelled with their partial output delivered, agents shut down. With `http` (what
        `switchboard run` asks for), the HTTP server of bot/http_server.py serves meanwhile,
        unless SWITCHBOARD_HTTP__PORT is off."""
        self._surfaces = {surface.name: surface for surface in surfaces}
        self.metrics.watch_surfaces(surfaces)
        view = OpsView(self)
        for surface in surfaces:  # the operations view, for a surface that shows it (admins)
            set_operations = getattr(surface, "set_operations", None)
            if set_operations is not None:
                set_operations(view.snapshot, view.act)
        server = self.http = self._http_server(surfaces) if http else None  # a taken port: first
        try:
            await self._serve(surfaces, stop, server, task_status)
        finally:
            if server is not None:
                server.close_unserved()
            self.http = None

    def _http_server(self, surfaces: Sequence[Surface]) -> HttpServer | None:
        if self.settings.http.port is None:
            return None  # SWITCHBOARD_HTTP__PORT=off
        http = HttpServer(self.settings.http, readiness=self.readiness, metrics=self.metrics_text)
        http.mount(surfaces)
        http.bind()
        return http

    async def _serve(
        self,
        surfaces: Sequence[Surface],
        stop: anyio.Event,
        http: HttpServer | None,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        async with tuned_for_serving(), anyio.create_task_group() as tg:
            self._tg = tg
            self._pool = RuntimePool(
                tg,
                client_preparer(self.plans.gate_for, self.settings),
                opener=self._opener,
                max_live=self.settings.max_agents,
                is_idle=self._agent_idle,
                on_stop=self._runtime_stopped,
            )
            tg.start_soon(self._pool.reap_idle, self.settings.runtime_idle)
            tg.start_soon(self._release_loop)
            self._relayed.open(tg)  # events relayed here, and messages a stopped process left
            keep_writing = getattr(self.store, "run", None)  # a store's own background writes
            if keep_writing is not None:
                tg.start_soon(keep_writing)
            await self._beat()  # registered before anything is relayed here
            await self._adopt_orphans()  # what an earlier process, or dead replicas, left
            self._starting = False
            if self.cluster.shared:
                tg.start_soon(self._relay_loop)
                tg.start_soon(self._beat_loop)
                self._hand_leases(surfaces)
            for surface in surfaces:
                surface.command_menu(command_menu())

            async def run_surfaces() -> None:
                async with anyio.create_task_group() as surfaces_tg:
                    for surface in surfaces:
                        await surfaces_tg.start(surface.run, self.on_event)
                    if http is not None:  # after the surfaces; it ends with the app's group
                        await tg.start(http.serve)
                    task_status.started()
                stop.set()  # every input ended (a scripted terminal at EOF)

            async with anyio.create_task_group() as outer:
                outer.start_soon(run_surfaces)
                await stop.wait()
                outer.cancel_scope.cancel()
            await self._wind_down()
            tg.cancel_scope.cancel()

    def _hand_leases(self, surfaces: Sequence[Surface]) -> None:
        """Surfaces that do something only one replica may (the Telegram poller, Discord's
        shards) get the cluster's named leases."""
        leases = SurfaceLeases(self.cluster)
        for surface in surfaces:
            set_leases = getattr(surface, "set_leases", None)
            if set_leases is not None:
                set_leases(leases)

    async def _wind_down(self) -> None:
        with anyio.CancelScope(shield=True):
            running = [runner for runner in self.runners.values() if runner.running]
            for runner in running:
                await runner.stop()
            with anyio.move_on_after(SHUTDOWN_BUDGET):
                await _all_idle(running)
            for runner in running:
                runner.hard_stop()
            with anyio.move_on_after(1):
                await _all_idle(running)
            if self._pool is not None:
                await self._pool.aclose()
            for surface in self._surfaces.values():
                await surface.close()
            await self._leave_cluster()

    async def _leave_cluster(self) -> None:
        """A clean stop lets its conversations go at once, for the other replicas."""
        if not self.cluster.shared:
            return
        with anyio.move_on_after(READY_STORE_TIMEOUT):
            try:
                for lease in list(self._leases.values()):
                    await self.cluster.release(lease)
                await self.cluster.aclose()
            except StoreError as exc:  # they expire by themselves within the TTL
                log.warning("could not leave the cluster cleanly: %s", exc.reason)
        self._leases.clear()

    # ---- operations: what /readyz and /metrics read (bot/http_server.py) ----------------------
    async def readiness(self) -> dict[str, str]:
        """What is not ready, by name (empty: ready). Cheap and spawn-free: one store write, the
        surfaces' own `connected` (a surface that does not report counts as connected), and the
        result of the last start of the default project's agent (none yet counts as ready: the
        first message starts it, and a failure then shows here until a start succeeds)."""
        problems: dict[str, str] = {}
        try:
            with anyio.fail_after(READY_STORE_TIMEOUT):
                await self.store.check_writable()
        except TimeoutError:
            problems["store"] = f"no answer within {READY_STORE_TIMEOUT:g} s"
        except StoreError as exc:
            problems["store"] = exc.reason
        for surface in self._surfaces.values():
            if not getattr(surface, "connected", True):
                problems[f"surface:{surface.name}"] = "not connected"
        if self.agent_start_failure:
            problems["agent"] = f"the last start failed ({self.agent_start_failure})"
        return problems

    async def live_state(self) -> LiveState:
        pool = self._pool
        return LiveState(
            queue_depth=sum(len(runner.queue) for runner in self.runners.values()),
            pending_approvals=self.approvals.pending,
            live_agents=pool.live if pool is not None else 0,
            ledger_backlog=len(await self.store.ledger_pending()),
        )

    async def metrics_text(self) -> bytes:
        return self.metrics.render(await self.live_state())

    # ---- operations: what the operations view reads and does (bot/ops_view.py) ---------------
    @property
    def surfaces(self) -> dict[str, Surface]:
        return dict(self._surfaces)

    @property
    def replicas_alive(self) -> list[str]:
        """The replicas alive at the last heartbeat, this one included (sorted)."""
        return sorted(self._alive | {self.replica})

    def agent_runtimes(self) -> list[AcpRuntime]:
        return self._pool.runtimes() if self._pool is not None else []

    async def stop_agent(self, runtime: AcpRuntime) -> None:
        """An admin stops an agent: its turns are stopped (as /stop) and given the cancel grace to
        end, so each ends with its "stopped" sentence rather than with the process gone under
        it; then its process is shut down, and its conversations drop their sessions (the next
        message resumes with session/load)."""
        if self._pool is None:
            return
        on_it = [
            runner
            for runner in self.runners.values()
            if runner.sessions.current is not None
            and runner.sessions.current.client.runtime is runtime
        ]
        running = [runner for runner in on_it if runner.running]
        for runner in running:
            await runner.stop()
        with anyio.move_on_after(self.settings.cancel_grace):
            for runner in running:
                await runner.wait_idle()
        await self._pool.discard(runtime.spec)
        for runner in on_it:
            runner.sessions.drop()

    # ---- the runtime pool's two hooks (idle reaping and the agent cap are the pool's rules) --
    def _runtime_stopped(self, client: AcpClient) -> None:
        """The pool stopped an idle agent (unused, or the least recently used at the cap): its
        conversations drop their session objects; the next message resumes with session/load."""
        for runner in self.runners.values():
            current = runner.sessions.current
            if current is not None and current.client is client:
                runner.sessions.drop()

    def _agent_idle(self, client: AcpClient) -> bool:
        return not client.busy and pool_key(client.runtime.spec) not in self._held

    def _wait_line(
        self, say: Callable[[str], Awaitable[None]] | None
    ) -> Callable[[], Awaitable[None]] | None:
        """What a turn waiting for a free agent says, once, in its conversation."""
        if say is None:
            return None
        limit = self.settings.max_agents
        line = (
            f"All {limit} agents are busy; your message waits for one to finish."
            if limit > 1
            else "The agent is busy in another conversation; your message waits for it."
        )
        return lambda: say(line)

    async def _redeliver_one(self, entry: DeliveryEntry) -> None:
        """A reply a stopped process (this one's predecessor, or a dead replica) did not get
        through: sent again, at most 5 times in all."""
        surface = self._surfaces[entry.key.surface]
        log.info("re-sending a reply a restart cut off (%s)", entry.key)
        try:
            await self.store.ledger_attempted(entry.entry_id)
            async with self.open_reply(surface, entry.key) as reply:
                if await reply.finish(entry.text):
                    await self.store.ledger_done(entry.entry_id)
        except Exception as exc:  # one conversation's fault must not stop the others
            log_fault(exc, "re-sending a reply", entry.key, None)

    async def _tell_cut_off(self, turn: JournalEntry) -> None:
        """A turn still in the journal of a stopped process is one it died in before its final
        text reached the ledger (a clean stop delivers the partial output, which closes it). Its
        conversation is told once: the notice goes through the ledger and closes the turn in the
        same store write. Turns of surfaces not running here wait for them, or expire."""
        surface = self._surfaces[turn.key.surface]
        log.info(
            "telling %s in %s that a restart cut off turn %s",
            turn.requester,
            turn.key,
            turn.turn_id,
        )
        try:
            await self.deliver(surface, turn.key, RESTART_NOTICE, turn_id=turn.turn_id)
        except Exception as exc:  # one conversation's fault must not stop the others
            log_fault(exc, "telling of a cut-off reply", turn.key, None, turn=turn.turn_id)


class ConversationHeld(Exception):
    """A conversation's lease stayed with another replica that would not take its events."""

    def __init__(self, key: ConversationKey, holder: str) -> None:
        self.key = key
        self.holder = holder
        super().__init__(f"{key} is held by replica {holder}, which takes no relayed events")


def _files_left(count: int) -> str:
    if count == 1:
        what, them = "The file attached to your message", "it"
    else:
        what, them = f"The {count} files attached to your message", "them"
    return (
        f"{what} could not be passed to the Switchboard replica serving this conversation; "
        f"send {them} again."
    )


async def _all_idle(runners: Sequence[ChatRunner]) -> None:
    """Return once none of `runners` has a turn running or waiting (the caller bounds it)."""
    for runner in runners:
        await runner.wait_idle()
