"""The operations view's data and actions, for a surface that shows them (the dashboard).

`OpsView.snapshot()` is a plain JSON-able dict built from the running `BotApp`: its agent
processes (project, agent, pid, uptime, RSS from /proc, sessions), every live conversation on
every surface with its state, the approvals waiting, the delivery ledger's backlog, the surfaces
and whether they are connected, the last faults (`bot/faults.recent_faults`) and the latest
audit records. `OpsView.act(actor, action, target)` stops a turn (what /stop does) or an agent
(its runtime stopped; its conversations resume with session/load next time), audited, and
returns one sentence for the admin.

Surfaces never import this module: `BotApp.serve` hands each surface that has a duck-typed
`set_operations(snapshot, act)` these two callables; the surface checks that the person is an
admin before calling either."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from acp import AcpRuntime, pool_key
from bot.commands import STOP, ParsedCommand, run_command
from bot.faults import recent_faults

if TYPE_CHECKING:
    from bot.app import BotApp
    from bot.chat_runner import ChatRunner

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


class OpsView:
    def __init__(self, app: BotApp) -> None:
        self._app = app

    # ---- what the view shows --------------------------------------------------------------
    async def snapshot(self) -> dict[str, Any]:
        app = self._app
        now = time.monotonic()
        waiting = app.approvals.waiting()
        ledger = await app.store.ledger_pending()
        audit = await app.store.audit_latest(AUDIT_SHOWN)
        return {
            "agents": self._agents(now),
            "conversations": [
                self._conversation(runner, now, waiting) for runner in app.runners.values()
            ],
            "approvals": [
                {"conversation": str(key) if key else "", "requester": who, "tool": tool}
                for key, who, tool in waiting
            ],
            "ledger_backlog": len(ledger),
            # this replica, and the others alive at its last heartbeat (one process: itself)
            "replica": {"id": app.replica, "alive": app.replicas_alive},
            "surfaces": [
                {"name": name, "connected": bool(getattr(surface, "connected", True))}
                for name, surface in app.surfaces.items()
            ],
            "faults": [fault.as_json() for fault in recent_faults.latest()],
            "audit": [record.as_json() for record in audit],
        }

    def _agents(self, now: float) -> list[dict[str, Any]]:
        names = self._names()
        rows = []
        for runtime in self._app.agent_runtimes():
            project, agent = names.get(pool_key(runtime.spec), ("", runtime.backend.name))
            rows.append(
                {
                    "pid": runtime.pid,
                    "project": project,
                    "agent": agent,
                    "uptime": round(now - runtime.started_at, 1),
                    "rss": rss_bytes(runtime.pid),
                    "sessions": sum(
                        1 for runner in self._app.runners.values() if _runtime_of(runner) is runtime
                    ),
                }
            )
        return rows

    def _names(self) -> dict[object, tuple[str, str]]:
        plans = self._app.plans
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
        runtime = _runtime_of(runner)
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
        runner = next((r for r in self._app.runners.values() if str(r.key) == conversation), None)
        if runner is None or not runner.running:
            return "That conversation has no turn running."
        await self._app.audit.admin("dashboard", actor, STOP_TURN, conversation=conversation)
        runner.stop_token = ""  # its own Stop button now finds the turn over
        with runner.held():
            await run_command(runner, ParsedCommand(STOP, ""))
        return f"The turn in {conversation} was stopped."

    async def _stop_agent(self, actor: str, pid_text: str) -> str:
        runtime = next((r for r in self._app.agent_runtimes() if str(r.pid) == pid_text), None)
        if runtime is None:
            return "That agent is not running any more."
        await self._app.audit.admin("dashboard", actor, STOP_AGENT, pid=str(runtime.pid))
        log.info("an admin (%s) stops the agent pid=%d", actor, runtime.pid)
        await self._app.stop_agent(runtime)
        return f"The agent (pid {runtime.pid}) was stopped."


def _runtime_of(runner: ChatRunner) -> AcpRuntime | None:
    current = runner.sessions.current
    return current.client.runtime if current is not None else None
