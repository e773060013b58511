"""The operations view's data and actions, for a surface that shows them (the dashboard).

`OpsView.snapshot()` is a plain JSON-able dict of what the bot runs: its agent
processes (project, agent, pid, uptime, RSS from /proc, sessions), every live conversation on
every surface with its state, the approvals waiting, the delivery ledger's backlog, the surfaces
and whether they are connected, the last faults (`bot/faults.recent_faults`) and the latest
audit records. `OpsView.act(actor, action, target)` stops a turn (what /stop does) or an agent
(its runtime stopped; its conversations resume with session/load next time), audited, and
returns one sentence for the admin.

Surfaces never import this module: `BotApp.serve` hands each surface that shows operations
(`surfaces.abilities.ShowsOperations`: `set_operations(snapshot, act)`) these two callables; the
surface checks that the person is an admin before calling either. The view reads and acts through
the services it is given (the conversations, the agent pool, the store, ...), never the app."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Protocol

import anyio

from acp import AcpRuntime, pool_key
from bot.agent_plans import AgentPlans
from bot.agent_pool import AgentPool
from bot.audit import AuditLog
from bot.chat_runner import ChatRunner
from bot.commands import STOP, ParsedCommand, run_command
from bot.conversations import Conversations, runtime_of
from bot.faults import recent_faults
from bot.permissions import ApprovalBroker
from bot.store import StateStore
from surfaces.abilities import SurfaceAbilities

__all__ = ["AUDIT_SHOWN", "STOP_AGENT", "STOP_TURN", "OpsView"]

log = logging.getLogger(__name__)

AUDIT_SHOWN = 100  # the latest audit records in a snapshot
STOP_TURN = "stop-turn"
STOP_AGENT = "stop-agent"
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int) -> int | None:
    """The process's resident memory from /proc (None where there is no /proc or no process)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class Replicas(Protocol):
    @property
    def alive(self) -> list[str]:
        """The replicas alive at the last heartbeat, this one included (sorted)."""
        ...


class OpsView:
    def __init__(
        self,
        conversations: Conversations,
        agents: AgentPool,
        *,
        surfaces: SurfaceAbilities,
        approvals: ApprovalBroker,
        store: StateStore,
        audit: AuditLog,
        plans: AgentPlans,
        replica: str,
        replicas: Replicas,
        cancel_grace: float,
    ) -> None:
        self._conversations = conversations
        self._agents_pool = agents
        self._surfaces = surfaces
        self._approvals = approvals
        self._store = store
        self._audit = audit
        self._plans = plans
        self._replica = replica
        self._replicas = replicas
        self._cancel_grace = cancel_grace  # how long a stopped agent's turns get to end

    # ---- what the view shows --------------------------------------------------------------
    async def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        waiting = self._approvals.waiting()
        ledger = await self._store.ledger_pending()
        audit = await self._store.audit_latest(AUDIT_SHOWN)
        return {
            "agents": self._agents(now),
            "conversations": [
                self._conversation(runner, now, waiting) for runner in self._conversations
            ],
            "approvals": [
                {"conversation": str(key) if key else "", "requester": who, "tool": tool}
                for key, who, tool in waiting
            ],
            "ledger_backlog": len(ledger),
            # this replica, and the others alive at its last heartbeat (one process: itself)
            "replica": {"id": self._replica, "alive": self._replicas.alive},
            "surfaces": [
                {"name": name, "connected": self._surfaces.connected(name)}
                for name in self._surfaces.names
            ],
            "faults": [fault.as_json() for fault in recent_faults.latest()],
            "audit": [record.as_json() for record in audit],
        }

    def _agents(self, now: float) -> list[dict[str, Any]]:
        names = self._names()
        rows = []
        for runtime in self._agents_pool.runtimes():
            project, agent = names.get(pool_key(runtime.spec), ("", runtime.backend.name))
            rows.append(
                {
                    "pid": runtime.pid,
                    "project": project,
                    "agent": agent,
                    "uptime": round(now - runtime.started_at, 1),
                    "rss": rss_bytes(runtime.pid),
                    "sessions": len(self._conversations.on(runtime)),
                }
            )
        return rows

    def _names(self) -> dict[object, tuple[str, str]]:
        plans = self._plans
        names: dict[object, tuple[str, str]] = {}
        for project in plans.projects:
            for agent in project.agents:
                names[pool_key(plans.target(project, agent).spec)] = (project.name, agent.name)
        return names

    @staticmethod
    def _conversation(
        runner: ChatRunner, now: float, waiting: list[tuple[Any, str, str]]
    ) -> dict[str, Any]:
        if any(key == runner.key for key, _, _ in waiting):
            state = "waiting for approval"
        elif runner.running:
            state = "answering"
        else:
            state = "idle"
        runtime = runtime_of(runner)
        return {
            "conversation": str(runner.key),
            "surface": runner.key.surface,
            "state": state,
            "for": round(now - runner.turn_started, 1) if runner.running else 0.0,
            "queued": len(runner.queue),
            "turn": runner.turn_id if runner.running else "",
            "agent_pid": runtime.pid if runtime is not None else None,
        }

    # ---- what an admin can do -------------------------------------------------------------
    async def act(self, actor: str, action: str, target: str) -> str:
        """Stop a turn (`target`: the conversation as the snapshot names it) or an agent
        (`target`: its pid). Returns the sentence the admin is shown."""
        if action == STOP_TURN:
            return await self._stop_turn(actor, target)
        if action == STOP_AGENT:
            return await self._stop_agent(actor, target)
        return "That is not an action of the operations view."

    async def _stop_turn(self, actor: str, conversation: str) -> str:
        runner = next((r for r in self._conversations if str(r.key) == conversation), None)
        if runner is None or not runner.running:
            return "That conversation has no turn running."
        await self._audit.admin("dashboard", actor, STOP_TURN, conversation=conversation)
        runner.stop_token = ""  # its own Stop button now finds the turn over
        with runner.held():
            await run_command(runner, ParsedCommand(STOP, ""))
        return f"The turn in {conversation} was stopped."

    async def _stop_agent(self, actor: str, pid_text: str) -> str:
        runtime = next((r for r in self._agents_pool.runtimes() if str(r.pid) == pid_text), None)
        if runtime is None:
            return "That agent is not running any more."
        await self._audit.admin("dashboard", actor, STOP_AGENT, pid=str(runtime.pid))
        log.info("an admin (%s) stops the agent pid=%d", actor, runtime.pid)
        await self._stop_runtime(runtime)
        return f"The agent (pid {runtime.pid}) was stopped."

    async def _stop_runtime(self, runtime: AcpRuntime) -> None:
        """Its turns are stopped (as /stop) and given the cancel grace to end, so each ends
        with its "stopped" sentence rather than with the process gone under it; then its process
        is shut down, and its conversations drop their sessions (the next message resumes with
        session/load)."""
        on_it = self._conversations.on(runtime)
        running = [runner for runner in on_it if runner.running]
        for runner in running:
            await runner.stop()
        with anyio.move_on_after(self._cancel_grace):
            for runner in running:
                await runner.wait_idle()
        await self._agents_pool.stop(runtime)
        for runner in on_it:
            runner.sessions.drop()
