"""`ConversationServices`: what a conversation needs from the process around it, and nothing more.

The chat runner, its agent sessions and the chat commands depend on this bundle, never on
`BotApp`, so a prompt flows one way: intake routes an event to the conversation, the conversation
runs its turn with these services. Each service is a small object with one job, built by the
composition root (bot/app.py): `TaskHost` runs background work in the app's task group,
`AgentPool` (bot/agent_pool.py) gives out the agents, `Delivery` (bot/delivery.py) replies
through the ledger; the rest is shared state (settings, store, approvals, audit, ...)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio.abc

from bot.access import AccessPolicy
from bot.agent_plans import AgentPlans
from bot.agent_pool import AgentPool
from bot.audit import AuditLog
from bot.delivery import Delivery
from bot.elicitation_broker import ElicitationBroker
from bot.ladder import RetryPolicy
from bot.metrics import Metrics
from bot.permissions import ApprovalBroker
from bot.store import StateStore
from config import Settings

__all__ = ["ConversationServices", "TaskHost"]


class TaskHost:
    """The app's task group, for work that outlives the event that started it (a turn, a
    background store read, a lease let go) and ends when the app winds down."""

    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None

    def open(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def spawn(self, func: Callable[[], Coroutine[Any, Any, None]]) -> None:
        assert self._tg is not None, "the app is not running"
        self._tg.start_soon(func)


class ConversationServices:
    """The services every conversation shares; the methods are the services' own."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: StateStore,
        replica: str,
        access: AccessPolicy,
        approvals: ApprovalBroker,
        audit: AuditLog,
        metrics: Metrics,
        plans: AgentPlans,
        tasks: TaskHost,
        agents: AgentPool,
        delivery: Delivery,
    ) -> None:
        self.settings = settings
        self.store = store
        self.replica = replica  # this replica's id: its journal entries and ledger entries carry it
        self.access = access  # who may do what (projects, what /sessions shows)
        self.approvals = approvals
        # the agent's questions, asked under the approvals' rules (who answers, timeout, tokens)
        self.elicitations = ElicitationBroker(
            store,
            access,
            approvals,
            timeout=settings.approval_timeout,
            audit=audit,
            replica=replica,
            say=delivery.deliver,
            spawn=tasks.spawn,
        )
        self.audit = audit  # approvals, admin actions, refused access (bot/audit.py)
        self.metrics = metrics  # what /metrics counts (bot/metrics.py)
        self.plans = plans  # every project and its agents
        self.policy = RetryPolicy.from_settings(settings.retry)
        self.spawn = tasks.spawn
        self.client = agents.client
        self.hold_agent = agents.hold_agent
        self.discard_client = agents.discard_client
        self.open_reply = delivery.open_reply
        self.finish_reply = delivery.finish_reply
        self.deliver = delivery.deliver
