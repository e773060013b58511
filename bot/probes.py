"""`Probes`: what `/readyz` and `/metrics` read (bot/http_server.py), cheap and spawn-free.

Readiness names what is not ready (empty: ready): the store, by one write through `StoreReading`
(waited for `READY_STORE_TIMEOUT` at most: a probe must answer quickly); each surface, by the
rule of `surfaces.abilities.SurfaceAbilities.connected` (a surface that reports its connection is
ready when connected; one served by this HTTP server, the dashboard, has no connection of its own
and is ready whenever the server answers, which is what is asking; one that reports nothing has
nothing to check); and the default project's agent, by its last start (none yet counts as ready:
the first message starts it, and a failure then shows here until a start succeeds).

`/metrics` adds to the counters what the app has right now (`LiveState`), the ledger backlog
through its own `StoreReading` (the last value, marked stale, when the store does not answer
within `SCRAPE_WAIT`)."""

from __future__ import annotations

from bot.agent_pool import AgentPool
from bot.conversations import Conversations
from bot.metrics import SCRAPE_WAIT, LiveState, Metrics
from bot.permissions import ApprovalBroker
from bot.services import TaskHost
from bot.store import StateStore
from bot.store_reading import StoreReading
from surfaces.abilities import SurfaceAbilities

__all__ = ["READY_STORE_TIMEOUT", "Probes"]

# /readyz's store check gives up after this long (a probe must answer quickly).
READY_STORE_TIMEOUT = 2.0


class Probes:
    def __init__(
        self,
        store: StateStore,
        tasks: TaskHost,
        *,
        surfaces: SurfaceAbilities,
        metrics: Metrics,
        agents: AgentPool,
        approvals: ApprovalBroker,
        conversations: Conversations,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._agents = agents
        self._approvals = approvals
        self._conversations = conversations
        self._surfaces = surfaces
        # What the probes read from the store, each waited for a bounded time (it may be down).
        self._writable = StoreReading(
            store.check_writable, tasks.spawn, initial=None, wait=READY_STORE_TIMEOUT
        )
        self._backlog = StoreReading(self._ledger_backlog, tasks.spawn, initial=0, wait=SCRAPE_WAIT)

    async def readiness(self) -> dict[str, str]:
        """What is not ready, by name (empty: ready); see the module's doc."""
        problems: dict[str, str] = {}
        if store_problem := await self._writable.refresh():
            problems["store"] = store_problem
        for name in self._surfaces.names:
            if not self._surfaces.connected(name):
                problems[f"surface:{name}"] = "not connected"
        if self._agents.start_failure:
            problems["agent"] = f"the last start failed ({self._agents.start_failure})"
        return problems

    async def live_state(self) -> LiveState:
        stale = bool(await self._backlog.refresh())
        return LiveState(
            queue_depth=sum(len(runner.queue) for runner in self._conversations),
            pending_approvals=self._approvals.pending,
            live_agents=self._agents.live,
            ledger_backlog=self._backlog.value,
            store_stale_for=self._backlog.stale_for() if stale else None,
        )

    async def metrics_text(self) -> bytes:
        return self._metrics.render(await self.live_state())

    async def _ledger_backlog(self) -> int:
        return len(await self._store.ledger_pending())
