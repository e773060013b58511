"""`BotApp`: the composition root. It builds the bot's parts, each with one job, and wires them in
one direction; one task group (`TaskHost`) owns the agent pool, every surface and every running
turn. The parts:

- `Intake` (bot/intake.py): each event from arrival to dispatch (access, de-duplication,
  routing, then a command, the conversation's runner, the approval broker or Stop);
- `Conversations` (bot/conversations.py): the live conversations' runners, idle release, the
  wind-down of running turns;
- `ConversationRouting` (bot/routing.py): which replica serves which conversation, and what
  stopped replicas (or an earlier process) left;
- the services runners use (`ConversationServices`, bot/services.py): `AgentPool`
  (bot/agent_pool.py), `Delivery` (bot/delivery.py), `TaskHost`;
- the operations side: `Probes` (bot/probes.py) for /readyz and /metrics, `OpsView`
  (bot/ops_view.py) for a surface that shows operations, the `HttpServer`.

The surfaces' optional abilities are found once, as `serve` starts (`SurfaceAbilities`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import anyio
import anyio.abc

from acp import RuntimeOpener, open_runtime
from bot.access import AccessPolicy
from bot.agent_plans import AgentPlans
from bot.agent_pool import AgentPool
from bot.audit import AuditLog
from bot.chat_runner import ChatRunner
from bot.cluster_choice import open_cluster
from bot.commands import command_menu
from bot.conversations import RELEASE_AFTER, Conversations
from bot.delivery import Delivery
from bot.http_server import HttpServer
from bot.intake import Intake
from bot.metrics import Metrics
from bot.ops_view import OpsView
from bot.permissions import ApprovalBroker
from bot.probes import Probes
from bot.projects import build_projects
from bot.routing import ConversationRouting
from bot.runtime_tuning import tuned_for_serving
from bot.services import ConversationServices, TaskHost
from bot.store import BackgroundWriter, StateStore
from config import Settings
from surfaces.abilities import SurfaceAbilities
from surfaces.base import ConversationKey, Surface

__all__ = ["BotApp"]


class BotApp:
    """The running bot (see the module's doc): built from the settings, the store and the access
    policy; `serve` runs it on the surfaces given."""

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
        self.audit = AuditLog(store, keep_days=settings.audit_days)
        self.metrics = Metrics()
        self.approvals = ApprovalBroker(
            store,
            access,
            timeout=settings.approval_timeout,
            audit=self.audit,
            replica=settings.replica_id,
            diff_file_after=settings.diff_file_after,
        )
        # Every project's every agent planned now: a bad entry stops the start, not a turn.
        self.plans = AgentPlans(settings, build_projects(settings))
        self.plans.check_all()
        # Replicas (bot/cluster.py, bot/routing.py): this replica serves the conversations
        # whose lease it holds (with one process: every conversation).
        self.cluster = open_cluster(
            settings.replica_id, settings.lease_ttl, store, key=settings.cluster_key
        )
        self.replica = self.cluster.replica
        self.tasks = TaskHost()
        self.agents = AgentPool(settings, self.plans, self.metrics, opener)
        self.delivery = Delivery(store, self.replica)
        self.routing = ConversationRouting(
            self.cluster,
            store=store,
            approvals=self.approvals,
            delivery=self.delivery,
            metrics=self.metrics,
            tasks=self.tasks,
            cluster_key=settings.cluster_key,
        )
        services = ConversationServices(
            settings=settings,
            store=store,
            replica=self.replica,
            access=access,
            approvals=self.approvals,
            audit=self.audit,
            metrics=self.metrics,
            plans=self.plans,
            tasks=self.tasks,
            agents=self.agents,
            delivery=self.delivery,
        )
        self.conversations = Conversations(services, self.routing, release_after=release_after)
        self.http: HttpServer | None = None  # while serving, unless SWITCHBOARD_HTTP__PORT=off

    @property
    def runners(self) -> dict[ConversationKey, ChatRunner]:
        """The live conversations' runners (the registry's own map: read it, do not change it)."""
        return self.conversations.runners

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
        by_name = {surface.name: surface for surface in surfaces}
        abilities = SurfaceAbilities.of(surfaces)
        self.metrics.watch_surfaces(surfaces)
        intake = Intake(
            by_name,
            settings=self.settings,
            store=self.store,
            access=self.access,
            audit=self.audit,
            approvals=self.approvals,
            routing=self.routing,
            conversations=self.conversations,
            delivery=self.delivery,
            rebuilders=abilities.file_rebuilders,
        )
        view = self._ops_view(abilities)
        for shows in abilities.operations:  # the operations view, for admins
            shows.set_operations(view.snapshot, view.act)
        server = self.http = self._http_server(abilities) if http else None
        try:  # a taken port stopped the start above, before any surface connected
            await self._serve(by_name, abilities, intake, stop, server, task_status)
        finally:
            if server is not None:
                server.close_unserved()
            self.http = None

    def _ops_view(self, abilities: SurfaceAbilities) -> OpsView:
        return OpsView(
            self.conversations,
            self.agents,
            surfaces=abilities,
            approvals=self.approvals,
            store=self.store,
            audit=self.audit,
            plans=self.plans,
            replica=self.replica,
            replicas=self.routing,
            cancel_grace=self.settings.cancel_grace,
        )

    def _http_server(self, abilities: SurfaceAbilities) -> HttpServer | None:
        if self.settings.http.port is None:
            return None  # SWITCHBOARD_HTTP__PORT=off
        probes = Probes(
            self.store,
            self.tasks,
            surfaces=abilities,
            metrics=self.metrics,
            agents=self.agents,
            approvals=self.approvals,
            conversations=self.conversations,
        )
        http = HttpServer(
            self.settings.http, readiness=probes.readiness, metrics=probes.metrics_text
        )
        http.mount(abilities.route_servers)
        http.bind()
        return http

    async def _serve(
        self,
        surfaces: Mapping[str, Surface],
        abilities: SurfaceAbilities,
        intake: Intake,
        stop: anyio.Event,
        http: HttpServer | None,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        async with tuned_for_serving(), anyio.create_task_group() as tg:
            self.tasks.open(tg)
            self.agents.open(tg, on_stop=self.conversations.agent_stopped)
            tg.start_soon(self.conversations.release_loop)
            if isinstance(self.store, BackgroundWriter):  # a store's own background writes
                tg.start_soon(self.store.run)
            # before the surfaces take events
            await self.routing.start(
                tg, surfaces, abilities.lease_takers, self.conversations, intake
            )
            for surface in surfaces.values():
                surface.command_menu(command_menu())

            async def run_surfaces() -> None:
                async with anyio.create_task_group() as surfaces_tg:
                    for surface in surfaces.values():
                        await surfaces_tg.start(surface.run, intake.on_event)
                    if http is not None:  # after the surfaces; it ends with the app's group
                        await tg.start(http.serve)
                    task_status.started()
                stop.set()  # every input ended (a scripted terminal at EOF)

            async with anyio.create_task_group() as outer:
                outer.start_soon(run_surfaces)
                await stop.wait()
                outer.cancel_scope.cancel()
            await self._wind_down(surfaces.values())
            tg.cancel_scope.cancel()

    async def _wind_down(self, surfaces: Iterable[Surface]) -> None:
        with anyio.CancelScope(shield=True):
            await self.conversations.stop_all()
            await self.agents.aclose()
            for surface in surfaces:
                await surface.close()
            await self.routing.leave()
