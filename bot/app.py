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
from bot.approval_commands import remember_withheld, withheld_commands
from bot.audit import AuditLog
from bot.chat_runner import STOP_TOKEN_PREFIX, ChatRunner
from bot.cluster import RelayedEvent
from bot.cluster_choice import open_cluster
from bot.commands import (
    PROJECT_TOKEN_PREFIX,
    STOP,
    ParsedCommand,
    command_menu,
    parse_command,
    project_pressed,
    run_command,
)
from bot.faults import fault_sentence, log_fault, report_store_full, told_without_store
from bot.http_server import HttpServer
from bot.ladder import RetryPolicy
from bot.metrics import SCRAPE_WAIT, LiveState, Metrics
from bot.ops_view import OpsView
from bot.permissions import ApprovalBroker
from bot.projects import build_projects
from bot.reply import ReplyStream, open_reply
from bot.routing import ConversationRouting
from bot.runtime_tuning import tuned_for_serving
from bot.store import DeliveryEntry, StateStore, StoreFull
from bot.store_reading import StoreReading
from config import Settings, valid_text
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, Surface

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
            store,
            access,
            timeout=settings.approval_timeout,
            audit=self.audit,
            replica=settings.replica_id,
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
        # Replicas (bot/cluster.py, bot/routing.py): this replica serves the conversations
        # whose lease it holds (with one process: every conversation).
        self.cluster = open_cluster(
            settings.replica_id, settings.lease_ttl, store, key=settings.cluster_key
        )
        self.replica = self.cluster.replica
        self.routing = ConversationRouting(self, self.cluster)
        # What the probes read from the store, each waited for a bounded time (it may be down).
        self._store_writable = StoreReading(
            store.check_writable, self.spawn, initial=None, wait=READY_STORE_TIMEOUT
        )
        self._backlog = StoreReading(self._ledger_backlog, self.spawn, initial=0, wait=SCRAPE_WAIT)

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
        try:
            await self.store.ledger_put(entry, closes_turn=turn_id)
        except StoreFull as exc:  # no room to record it: the reply still goes out, unrecorded
            report_store_full(exc, "recording a reply")
            await reply.finish(text)
            return
        delivered = await reply.finish(text)
        try:
            if delivered:
                await self.store.ledger_done(entry.entry_id)
            else:
                await self.store.ledger_attempted(entry.entry_id)
        except StoreFull as exc:  # a restart re-sends it: one duplicate at worst
            report_store_full(exc, "recording a delivery")

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
            if self.routing.moved_here(key):  # served elsewhere since this replica last did
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
            remember_withheld(runner)
            runner.release()
            self.routing.let_go(key)
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
            queued = await self.accept_event(event)
        except Exception as exc:  # a fault of ours: this event only, the adapter goes on
            await self.event_fault(event, exc)
        finally:
            # A queued message's runner signals when its turn is done; anything else is done now.
            if not queued and isinstance(event, Inbound) and event.handled is not None:
                event.handled.set()

    async def accept_event(
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
        if not await self.routing.take(event, relayed.hops if relayed else 0):
            return False  # handed to the replica serving this conversation
        self.runner(surface, event.key)  # one runner per lease: its release lets the lease go
        if relayed is not None and relayed.files and isinstance(event, Inbound):
            event = await self.routing.with_files(surface, event, relayed)
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
            surface.capabilities.command_prefixes,
            event.text,
            runner.agent_commands,
            withheld_commands(runner),
        )
        if parsed is not None and parsed.command.handler is not None:
            with runner.held():
                await run_command(runner, parsed, event.user)
            return False
        if parsed is not None:  # the agent's (/compact), however this surface spells it
            event = replace(event, text=f"/{parsed.command.name} {parsed.args}".rstrip())
        await runner.submit(event)  # everything else is prompt text as typed
        return True

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
            # a live reply's button pressed from another conversation: audited, told the same
            shown = [key for key, r in self.runners.items() if r.stop_token == press.token]
            await self.approvals.refuse_misplaced(press, shown[0] if shown else None, "stop")
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

    async def event_fault(self, event: Inbound | ChoiceAnswer, exc: Exception) -> None:
        runner = self.runners.get(event.key)
        if runner is not None:
            runner.log_fault(exc, "handling an event", event=event.event_id)
        else:
            log_fault(exc, "handling an event", event.key, None, event=event.event_id)
        surface = self._surfaces.get(event.key.surface)
        try:
            if surface is not None and self.access.may_chat(event.key.surface, event.user):
                with anyio.move_on_after(self.settings.request_timeout):
                    if told_without_store(exc):  # the ledger is what failed
                        async with self.open_reply(surface, event.key) as reply:
                            await reply.finish(fault_sentence(exc))
                    else:
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
            keep_writing = getattr(self.store, "run", None)  # a store's own background writes
            if keep_writing is not None:
                tg.start_soon(keep_writing)
            await self.routing.start(tg, surfaces)  # before the surfaces take events
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
            await self.routing.leave()

    # ---- operations: what /readyz and /metrics read (bot/http_server.py) ----------------------
    async def readiness(self) -> dict[str, str]:
        """What is not ready, by name (empty: ready). Cheap and spawn-free: one store write, the
        surfaces' own `connected` (a surface that does not report counts as connected), and the
        result of the last start of the default project's agent (none yet counts as ready: the
        first message starts it, and a failure then shows here until a start succeeds)."""
        problems: dict[str, str] = {}
        if store_problem := await self._store_writable.refresh():
            problems["store"] = store_problem
        for surface in self._surfaces.values():
            if not getattr(surface, "connected", True):
                problems[f"surface:{surface.name}"] = "not connected"
        if self.agent_start_failure:
            problems["agent"] = f"the last start failed ({self.agent_start_failure})"
        return problems

    async def live_state(self) -> LiveState:
        stale = bool(await self._backlog.refresh())
        pool = self._pool
        return LiveState(
            queue_depth=sum(len(runner.queue) for runner in self.runners.values()),
            pending_approvals=self.approvals.pending,
            live_agents=pool.live if pool is not None else 0,
            ledger_backlog=self._backlog.value,
            store_stale_for=self._backlog.stale_for() if stale else None,
        )

    async def _ledger_backlog(self) -> int:
        return len(await self.store.ledger_pending())

    async def metrics_text(self) -> bytes:
        return self.metrics.render(await self.live_state())

    # ---- operations: what the operations view reads and does (bot/ops_view.py) ---------------
    @property
    def surface_of(self) -> dict[str, Surface]:
        """The running surfaces by name (the app's own map: read it, do not change it)."""
        return self._surfaces

    @property
    def surfaces(self) -> dict[str, Surface]:
        return dict(self._surfaces)

    @property
    def replicas_alive(self) -> list[str]:
        """The replicas alive at the last heartbeat, this one included (sorted)."""
        return self.routing.alive

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


async def _all_idle(runners: Sequence[ChatRunner]) -> None:
    """Return once none of `runners` has a turn running or waiting (the caller bounds it)."""
    for runner in runners:
        await runner.wait_idle()
