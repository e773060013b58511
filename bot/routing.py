"""Which replica serves which conversation (issue 16; bot/cluster.py says how replicas
coordinate): the app's side of it. `ConversationRouting` takes each event's conversation lease
(or hands the event to the replica holding it), keeps the leases this replica holds with a
heartbeat, stops a turn whose lease another replica took, and adopts what stopped replicas (or,
at start-up, an earlier process) left: relayed events, undelivered replies, cut-off turns and
the messages that were waiting behind them. With one process (`SoloCluster`) only the last part
does anything: every lease is granted at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from bot.chat_runner import ChatRunner
from bot.cluster import (
    MAX_HOPS,
    Cluster,
    Lease,
    RelayedEvent,
    RelayRejected,
    RelaySeal,
    SurfaceLeases,
    conversation_lease,
    decode_event,
    encode_event,
)
from bot.conversations import Conversations
from bot.delivery import Delivery
from bot.faults import log_fault
from bot.metrics import Metrics
from bot.notices import RESTART_NOTICE
from bot.permissions import ApprovalBroker
from bot.services import TaskHost
from bot.store import (
    DeliveryEntry,
    FencedStore,
    JournalEntry,
    StateStore,
    StoreError,
    inner_store,
)
from surfaces.abilities import TakesLeases
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, Surface
from surfaces.lanes import Lanes

__all__ = ["CONVERSATION_HELD", "ConversationRouting", "EventSink"]

log = logging.getLogger(__name__)

# How long one read of relayed events waits (also the pause after a failed read).
RELAY_WAIT = 1.0
CONVERSATION_HELD = (
    "Another Switchboard replica is serving this conversation and did not take your message; "
    "send it again in a minute."
)
LEAVE_TIMEOUT = 2.0  # a clean stop's goodbye to the cluster gives up after this long


class EventSink(Protocol):
    """Where relayed events, and messages handed on, are accepted (bot/intake.py)."""

    async def accept_event(
        self, event: Inbound | ChoiceAnswer, relayed: RelayedEvent | None = None
    ) -> bool: ...

    async def event_fault(self, event: Inbound | ChoiceAnswer, exc: Exception) -> None: ...


class ConversationRouting:
    """This replica's part in the cluster: see the module's doc. Built with the services it
    uses; the running surfaces, the conversations and where events go are given to `start`."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        store: StateStore,
        approvals: ApprovalBroker,
        delivery: Delivery,
        metrics: Metrics,
        tasks: TaskHost,
        cluster_key: str,
    ) -> None:
        self.cluster = cluster
        self._store = store
        self._approvals = approvals
        self._delivery = delivery
        self._metrics = metrics
        self._tasks = tasks
        # given to `start`: nothing is routed before it
        self._surfaces: dict[str, Surface] = {}
        self._conversations: Conversations | None = None
        self._events: EventSink | None = None
        self._leases: dict[ConversationKey, Lease] = {}  # one per live runner
        self._stale: set[ConversationKey] = set()  # leases that moved here: sessions reload
        self._lost: dict[ConversationKey, Lease] = {}  # taken by another while a turn ran
        self._alive: set[str] = set()  # the replicas alive at the last heartbeat
        self._beating_since: float | None = None  # the first of the heartbeats since a failure
        self._orphans_due = False  # a replica died: adopt what it left
        self._starting = True  # until the first adoption, at start-up, is done
        self._relayed: Lanes[ConversationKey, RelayedEvent] = Lanes(
            self._accept_relayed, failure="the bot failed on a relayed event in %s", logger=log
        )
        # Only a shared cluster relays, and it has a key (open_cluster checked it).
        self._seal = RelaySeal(cluster_key)
        fenced = inner_store(store)
        if cluster.shared and isinstance(fenced, FencedStore):
            fenced.fence_of = self.fence_of  # the conversation's writes carry its lease's token

    @property
    def alive(self) -> list[str]:
        """The replicas alive at the last heartbeat, this one included (sorted)."""
        return sorted(self._alive | {self.cluster.replica})

    def moved_here(self, key: ConversationKey) -> bool:
        """Whether the conversation was served elsewhere since this replica last did (asked
        once, by the runner being built for it)."""
        if key in self._stale:
            self._stale.discard(key)
            return True
        return False

    async def start(
        self,
        tg: anyio.abc.TaskGroup,
        surfaces: Mapping[str, Surface],
        lease_takers: Sequence[TakesLeases],
        conversations: Conversations,
        events: EventSink,
    ) -> None:
        """Before the surfaces run: register, adopt what was left, then keep beating. The
        surfaces (by name), the conversations (a runner per lease held) and where relayed events
        go are the routing's from now on; `lease_takers` (the Telegram poller, Discord's shards:
        what only one replica may do) get the cluster's named leases."""
        self._surfaces = dict(surfaces)
        self._conversations, self._events = conversations, events
        self._relayed.open(tg)  # events relayed here, and messages a stopped process left
        await self._beat()  # registered before anything is relayed here
        await self._adopt_orphans()  # what an earlier process, or dead replicas, left
        self._starting = False
        if self.cluster.shared:
            tg.start_soon(self._relay_loop)
            tg.start_soon(self._beat_loop)
            leases = SurfaceLeases(self.cluster)
            for surface in lease_takers:
                surface.set_leases(leases)

    async def take(self, event: Inbound | ChoiceAnswer, hops: int) -> bool:
        """True when this replica serves the event's conversation (it holds its lease, or took
        it now); False when the event was handed to the replica that holds it, or could not
        be (the person is told)."""
        try:
            return await self._take(event, hops)
        except ConversationHeld as held:
            log.warning("%s", held)
            surface = self._surfaces[event.key.surface]
            await self._delivery.deliver(surface, event.key, CONVERSATION_HELD)
            return False

    def fence_of(self, key: ConversationKey) -> tuple[str, str] | None:
        lease = self._leases.get(key) or self._lost.get(key)
        return None if lease is None else (lease.name, str(lease.token))

    async def _take(self, event: Inbound | ChoiceAnswer, hops: int) -> bool:
        """`take`, but a lease that stays elsewhere raises `ConversationHeld`."""
        key = event.key
        if key in self._leases:
            return True
        name = conversation_lease(key)
        deadline = time.monotonic() + 2 * self.cluster.ttl
        while True:
            got = await self.cluster.acquire(name)
            if isinstance(got, Lease):
                self._hold(key, got)
                return True
            if hops < MAX_HOPS and await self.cluster.relay(
                got, self._seal.seal(encode_event(event, hops + 1), got)
            ):
                log.info("handed event %s of %s to replica %s", event.event_id, key, got)
                self._metrics.relayed.inc()
                return False
            if time.monotonic() > deadline:
                raise ConversationHeld(key, got)
            # its holder is not alive (or the lease keeps moving): it expires within the TTL
            await anyio.sleep(self.cluster.ttl / 10)

    def _hold(self, key: ConversationKey, lease: Lease) -> None:
        self._leases[key] = lease
        self._lost.pop(key, None)
        if lease.moved:
            self._stale.add(key)

    def let_go(self, key: ConversationKey) -> None:
        lease = self._leases.pop(key, None)
        if lease is not None and self.cluster.shared:
            self._tasks.spawn(lambda: self._release_lease(lease))

    async def _release_lease(self, lease: Lease) -> None:
        try:
            await self.cluster.release(lease)
        except StoreError as exc:  # it expires by itself within the TTL
            log.warning("could not release lease %s: %s", lease.name, exc.reason)

    async def _accept_relayed(self, relayed: RelayedEvent) -> None:
        event = relayed.event
        if event.key.surface not in self._surfaces:
            log.warning("dropping an event relayed for surface %s, not run here", event.key.surface)
            return
        assert self._events is not None, "routing has not started"
        try:
            await self._events.accept_event(event, relayed)
        except Exception as exc:  # a fault of ours: this event only
            await self._events.event_fault(event, exc)

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
            self._file_relayed(payloads, self.cluster.replica)

    def _file_relayed(self, payloads: Sequence[str], sent_to: str) -> None:
        """Relayed events sealed for `sent_to` (this replica, or a dead one adopted) go to their
        conversation's lane; anything else is dropped with one WARNING line and counted."""
        for sealed in payloads:
            try:
                payload = self._seal.open(sealed, sent_to)
            except RelayRejected as exc:
                log.warning("%s (relayed to replica %s)", exc, sent_to)
                self._metrics.relays_rejected.inc()
                continue
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
            dead = await self.cluster.dead_replicas()
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
            self._metrics.replicas_adopted.inc()
            self._file_relayed(payloads, replica)
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
        self._metrics.leases_lost.inc()
        lease = self._leases.pop(key, None)
        assert self._conversations is not None, "routing has not started"
        runner = self._conversations.lost(key)
        if runner is None or lease is None:
            return
        # Its turn's last writes (the partial reply as it stops) go out under the old token,
        # so the store refuses them, until the runner is done.
        self._lost[key] = lease
        waiting = runner.lose()
        self._tasks.spawn(lambda: self._forget_lost(key, lease, runner))
        if waiting:
            self._tasks.spawn(lambda: self._hand_on(waiting))

    async def _hand_on(self, waiting: Sequence[tuple[Inbound, str]]) -> None:
        """Messages that were waiting here when another replica took their conversation go to
        that replica, in order."""
        assert self._events is not None, "routing has not started"
        for inbound, journal_id in waiting:
            try:
                if await self._take(inbound, 1):  # it came back to this replica
                    await self._events.accept_event(inbound, RelayedEvent(inbound, 1))
                if journal_id:
                    await self._store.journal_close(journal_id)
            except Exception as exc:  # a fault of ours: this message only
                await self._events.event_fault(inbound, exc)

    async def _forget_lost(self, key: ConversationKey, lease: Lease, runner: ChatRunner) -> None:
        await runner.wait_idle()
        if self._lost.get(key) is lease:
            del self._lost[key]

    def _orphaned(self, replica: str) -> bool:
        """An entry written by `replica` is nobody's now: at start-up, every entry of this
        replica's id (an earlier process; with one process, every entry), later those of
        replicas seen not alive."""
        if replica == self.cluster.replica or not self.cluster.shared:
            return self._starting
        # others' only once their death was seen (a TTL of heartbeats after start-up)
        return not self._starting and replica not in self._alive

    async def _adopt_orphans(self) -> None:
        """What dead replicas (or an earlier process) left: approval cards withdrawn (no lease
        needed: only their buttons go), undelivered replies sent again, cut-off turns told, each
        in its conversation under its lease (so two replicas never both do one). What cannot
        be done now (the conversation held elsewhere) is tried at the next heartbeat."""
        self._orphans_due = False
        try:
            pending = [e for e in await self._store.ledger_pending() if self._orphaned(e.replica)]
            turns = [t for t in await self._store.journal_open_turns() if self._orphaned(t.replica)]
        except StoreError as exc:
            log.warning("cannot read what stopped replicas left: %s", exc.reason)
            self._orphans_due = True
            return
        await self._approvals.withdraw_left(self._surfaces, self._orphaned)
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
            await self._store.journal_close(waiting.turn_id)  # its new turn journals it anew
        except StoreError as exc:
            log.warning("could not close waiting message %s: %s", waiting.turn_id, exc.reason)
            self._orphans_due = True
            return
        if relayed is not None:
            log.info("sending on a message a stopped process left waiting in %s", waiting.key)
            self._relayed.put(waiting.key, relayed)

    async def _adopt_conversation(self, key: ConversationKey) -> bool:
        surface = self._surfaces.get(key.surface)
        if surface is None or self._conversations is None:
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
            self._hold(key, got)
        self._conversations.runner(surface, key)  # released with its lease once idle
        return True

    async def leave(self) -> None:
        """A clean stop lets its conversations go at once, for the other replicas."""
        if not self.cluster.shared:
            return
        with anyio.move_on_after(LEAVE_TIMEOUT):
            try:
                for lease in list(self._leases.values()):
                    await self.cluster.release(lease)
                await self.cluster.aclose()
            except StoreError as exc:  # they expire by themselves within the TTL
                log.warning("could not leave the cluster cleanly: %s", exc.reason)
        self._leases.clear()

    async def _redeliver_one(self, entry: DeliveryEntry) -> None:
        """A reply a stopped process (this one's predecessor, or a dead replica) did not get
        through: sent again, at most 5 times in all."""
        surface = self._surfaces[entry.key.surface]
        log.info("re-sending a reply a restart cut off (%s)", entry.key)
        try:
            await self._store.ledger_attempted(entry.entry_id)
            async with self._delivery.open_reply(surface, entry.key) as reply:
                if await reply.finish(entry.text):
                    await self._store.ledger_done(entry.entry_id)
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
            await self._delivery.deliver(surface, turn.key, RESTART_NOTICE, turn_id=turn.turn_id)
        except Exception as exc:  # one conversation's fault must not stop the others
            log_fault(exc, "telling of a cut-off reply", turn.key, None, turn=turn.turn_id)


class ConversationHeld(Exception):
    """A conversation's lease stayed with another replica that would not take its events."""

    def __init__(self, key: ConversationKey, holder: str) -> None:
        self.key = key
        self.holder = holder
        super().__init__(f"{key} is held by replica {holder}, which takes no relayed events")
