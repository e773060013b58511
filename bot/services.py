"""`ConversationServices`: what a conversation needs from the process around it, and nothing more.

The chat runner, its agent sessions and the chat commands depend on this protocol, never on
`BotApp`, so a prompt flows one way: the app routes an event to the conversation, the conversation
runs its turn with these services. `BotApp` implements it; a test can too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from acp import AcpClient, RuntimeSpec
from bot.access import AccessPolicy
from bot.audit import AuditLog
from bot.ladder import RetryPolicy
from bot.metrics import Metrics
from bot.permissions import ApprovalBroker
from bot.reply import ReplyStream
from bot.store import StateStore
from config import Settings
from surfaces.base import ConversationKey, Surface

if TYPE_CHECKING:  # agent_sessions uses these services
    from bot.agent_sessions import AgentPlans, AgentTarget


class ConversationServices(Protocol):
    settings: Settings
    store: StateStore
    replica: str  # this replica's id: its journal entries and ledger entries carry it
    approvals: ApprovalBroker
    policy: RetryPolicy
    access: AccessPolicy  # who may do what (projects, what /sessions shows)
    spec: RuntimeSpec  # the default project's agent
    plans: AgentPlans  # every project and its agents
    metrics: Metrics  # what /metrics counts (bot/metrics.py)
    audit: AuditLog  # approvals, admin actions, refused access (bot/audit.py)

    def spawn(self, func: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `func` in the app's task group: a conversation's work outlives the event that
        started it, and ends when the app winds down."""
        ...

    async def client(
        self,
        target: AgentTarget | None = None,
        *,
        say: Callable[[str], Awaitable[None]] | None = None,
    ) -> AcpClient:
        """The pooled agent of `target` (default: the default project's), started (or
        restarted) on demand. When every agent allowed is busy the call waits for one; `say`
        tells the conversation so, once."""
        ...

    def hold_agent(self, target: AgentTarget | None = None) -> Callable[[], None]:
        """Until the returned function is called (a turn runs or waits in the conversation),
        the pool neither stops `target`'s agent as idle nor for another's room."""
        ...

    async def discard_client(self, target: AgentTarget | None = None) -> None:
        """Drop that pooled agent (it died); the next `client()` starts a new one."""
        ...

    def open_reply(
        self, surface: Surface, key: ConversationKey
    ) -> AbstractAsyncContextManager[ReplyStream]:
        """A live reply in the conversation, paced with every other reply to the same chat."""
        ...

    async def finish_reply(
        self, reply: ReplyStream, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        """Deliver a reply's final text through the ledger; `turn_id` closes that journalled
        turn in the same store write."""
        ...

    async def deliver(
        self, surface: Surface, key: ConversationKey, text: str, *, turn_id: str | None = None
    ) -> None:
        """A whole message at once: `open_reply`, then `finish_reply`."""
        ...
