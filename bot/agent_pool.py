"""`AgentPool`: the app's agents, on acp's `RuntimePool` with the app's two rules.

A conversation gets its project's agent from here (`client`: started, or restarted, on demand;
one that waits for a free agent under `SWITCHBOARD_MAX_AGENTS` says so once in its
conversation), holds it while its turn runs or waits (`hold_agent`: the pool stops none of
those as idle nor for another's room), and drops a dead one (`discard_client`). What the last
start of the default project's agent ended with is kept for /readyz, so no probe spawns one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import anyio.abc

from acp import (
    AGENT_ERRORS,
    AcpClient,
    AcpRuntime,
    PoolKey,
    RuntimeOpener,
    RuntimePool,
    pool_key,
)
from bot.agent_plans import AgentPlans, AgentTarget, client_preparer
from bot.metrics import Metrics
from config import Settings

__all__ = ["AgentPool"]


class AgentPool:
    def __init__(
        self, settings: Settings, plans: AgentPlans, metrics: Metrics, opener: RuntimeOpener
    ) -> None:
        self._settings = settings
        self._plans = plans
        self._metrics = metrics
        self._opener = opener  # how agents start: a process by default
        self._pool: RuntimePool[AcpClient] | None = None
        # Conversations whose turn runs or waits, by the pool key of their agent: the pool stops
        # none of these agents (a turn between taking its agent and prompting it looks idle).
        self._held: Counter[PoolKey] = Counter()
        # What the last start of the default project's agent ended with ("": it started; None:
        # not started yet), for /readyz: a probe never spawns an agent.
        self.start_failure: str | None = None

    def open(self, tg: anyio.abc.TaskGroup, on_stop: Callable[[AcpClient], None]) -> None:
        """Start the pool in the app's task group; `on_stop` hears of every agent it stops as
        idle or for room (its conversations drop their session objects)."""
        self._pool = RuntimePool(
            tg,
            client_preparer(self._plans.gate_for, self._settings),
            opener=self._opener,
            max_live=self._settings.max_agents,
            is_idle=self._idle,
            on_stop=on_stop,
        )
        tg.start_soon(self._pool.reap_idle, self._settings.runtime_idle)

    async def client(
        self,
        target: AgentTarget | None = None,
        *,
        say: Callable[[str], Awaitable[None]] | None = None,
    ) -> AcpClient:
        """The pooled agent of `target` (default: the default project's), started (or
        restarted) on demand. When every agent allowed is busy the call waits for one; `say`
        tells the conversation so, once."""
        assert self._pool is not None, "the agent pool is not open"
        spec = (target or self._plans.default).spec
        default = pool_key(spec) == pool_key(self._plans.default.spec)
        try:
            client = await self._pool.get(spec, on_wait=self.wait_line(say))
        except AGENT_ERRORS as exc:
            if default:
                self.start_failure = type(exc).__name__
            raise
        if default:
            self.start_failure = ""
        return client

    def hold_agent(self, target: AgentTarget | None = None) -> Callable[[], None]:
        """Until the returned function is called (a turn runs or waits in the conversation),
        the pool neither stops `target`'s agent as idle nor for another's room."""
        key = pool_key((target or self._plans.default).spec)
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
        """Drop that pooled agent (it died); the next `client()` starts a new one."""
        if self._pool is not None:
            self._metrics.respawns.inc()  # only the ladder discards: a dead agent, respawned
            await self._pool.discard((target or self._plans.default).spec)

    async def stop(self, runtime: AcpRuntime) -> None:
        """Shut `runtime`'s agent down (an admin's stop); the next `client()` starts another."""
        if self._pool is not None:
            await self._pool.discard(runtime.spec)

    def runtimes(self) -> list[AcpRuntime]:
        return self._pool.runtimes() if self._pool is not None else []

    @property
    def live(self) -> int:
        return self._pool.live if self._pool is not None else 0

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    def _idle(self, client: AcpClient) -> bool:
        return not client.busy and pool_key(client.runtime.spec) not in self._held

    def wait_line(
        self, say: Callable[[str], Awaitable[None]] | None
    ) -> Callable[[], Awaitable[None]] | None:
        """What a turn waiting for a free agent says, once, in its conversation."""
        if say is None:
            return None
        limit = self._settings.max_agents
        line = (
            f"All {limit} agents are busy; your message waits for one to finish."
            if limit > 1
            else "The agent is busy in another conversation; your message waits for it."
        )
        return lambda: say(line)
