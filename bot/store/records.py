"""The records the state store keeps, as every backend reads and writes them: plain frozen
dataclasses, nothing backend-specific."""

from __future__ import annotations

from dataclasses import dataclass

from bot.conversation import ConversationKey

__all__ = [
    "MAX_SESSION_HISTORY",
    "ApprovalRecord",
    "AuditRecord",
    "DeliveryEntry",
    "JournalEntry",
    "SessionRecord",
]

MAX_SESSION_HISTORY = 20  # agent sessions remembered per conversation (the least recent go)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One one-time choice token. All tokens offered for one permission request share `group`."""

    token: str
    group: str
    option_id: str
    requester: str
    key: ConversationKey
    created: float
    replica: str = ""  # the replica that asked (see `DeliveryEntry.replica`)
    message: str = ""  # the card's message id on its surface ("" until it is shown)


@dataclass(frozen=True, slots=True)
class DeliveryEntry:
    """A final reply that must reach the user, kept until delivery is confirmed."""

    entry_id: str
    key: ConversationKey
    text: str
    created: float
    attempts: int = 0
    replica: str = ""  # the replica that wrote it ("" before replicas, or with one process)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A turn in flight. It is opened when the turn starts and closed when the turn's final text
    reaches the ledger, so an entry still open at start-up is a turn the process died in."""

    turn_id: str
    key: ConversationKey
    requester: str  # the platform user id of the person who asked
    started: float
    replica: str = ""  # the replica running the turn (see `DeliveryEntry.replica`)
    # A message waiting behind a running turn, not a turn: the message itself (bot/cluster.py's
    # `encode_event`), so whoever adopts it after a crash sends it on instead of losing it.
    message: str = ""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """An agent session a conversation used, in one project: what `/sessions` lists. `title` is
    the agent's latest (session_info_update), "" until it gives one; times are epoch seconds."""

    session_id: str
    project: str
    backend: str
    workspace: str
    title: str = ""
    created: float = 0.0
    last_used: float = 0.0


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit log entry (bot/audit.py): an approval, an admin action or a refused access.
    `actor` is who did it (a platform user id); `details` never holds message text or tokens."""

    at: float  # epoch seconds
    kind: str  # approval | admin | refused
    surface: str
    actor: str
    action: str
    details: dict[str, str]

    def as_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "kind": self.kind,
            "surface": self.surface,
            "actor": self.actor,
            "action": self.action,
            **self.details,
        }
