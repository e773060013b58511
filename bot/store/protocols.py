"""What the state store offers, one Protocol per concern; `StateStore` is all of them, the seam
the bot is written against.

The contract is written so a shared Redis store can replace the embedded SQLite one without
touching callers:

- every method is one atomic operation; no transaction ever spans two calls, so callers never
  hold a lock or see half of another caller's write;
- expiry is a TTL in seconds given at write time; an expired item behaves as if absent;
- nothing backend-specific (SQL, connections, cursors) appears here, only the records of
  `bot/store/records.py` and the errors of `bot/store/errors.py`.

The Redis version (`bot/store/redis.py`) maps each call to one round trip: `claim_event` is a
script that checks the stored expiry and `SET`s with `PX`; `put_approvals` writes each token (and
a set per group) in one `MULTI`; `take_approval` is a Lua script that reads the token and deletes
every token of its group, so two replicas pressing the same button cannot both win;
`ledger_put(entry, closes_turn=...)` adds the ledger entry and closes the turn in one script.

What only some stores can do is declared in `bot/store/abilities.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.conversation import Binding, ConversationKey
from bot.store.records import (
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    SessionRecord,
)

__all__ = [
    "ApprovalStore",
    "AuditStore",
    "BindingStore",
    "ConversationSettings",
    "DeliveryStore",
    "EventClaims",
    "SessionHistoryStore",
    "StateStore",
    "StoreHealth",
]


class BindingStore(Protocol):
    """Which agent session a conversation is bound to, and the project a place starts in."""

    async def get_binding(self, key: ConversationKey) -> Binding | None: ...

    async def put_binding(self, key: ConversationKey, binding: Binding) -> None: ...

    async def delete_binding(self, key: ConversationKey) -> None: ...

    async def get_place(self, place: ConversationKey) -> str | None:
        """The project a place (a topic, thread, channel or group) is bound to, if any."""
        ...

    async def put_place(self, place: ConversationKey, project: str) -> None: ...

    async def delete_place(self, place: ConversationKey) -> None: ...


class ConversationSettings(Protocol):
    """Small named settings a conversation keeps across restarts (`busy_mode`, ...), each a short
    string; a conversation without one follows the process's setting."""

    async def conversation_setting(self, key: ConversationKey, name: str) -> str | None:
        """The conversation's value of `name`, or None when it has none."""
        ...

    async def set_conversation_setting(
        self, key: ConversationKey, name: str, value: str | None
    ) -> None:
        """Keep `value` for `name` in this conversation; None forgets it."""
        ...


class EventClaims(Protocol):
    """Inbound de-duplication: each platform event handled once, across replicas."""

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        """True the first time `event_key` is seen within `ttl` seconds, False for a redelivery.
        An expired key may be claimed again. A `claimant` (a unique token per claim) makes the
        claim safe to retry: a claim that was made but whose answer was lost is won again by the
        same claimant, not taken for a redelivery."""
        ...


class ApprovalStore(Protocol):
    """The one-time tokens of the approval cards waiting for a person."""

    async def put_approvals(self, records: Sequence[ApprovalRecord], ttl: float) -> None: ...

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        """Consume `token` and every other token of its group; None when unknown, expired or
        already used. Of two concurrent takes in one group, exactly one gets the record."""
        ...

    async def drop_approvals(self, group: str) -> None: ...

    async def approval_shown(self, group: str, message: str) -> None:
        """The group's card is the surface's message `message` (what closes it after a crash)."""
        ...

    async def approvals_pending(self) -> list[ApprovalRecord]:
        """Every unexpired token, oldest first."""
        ...


class DeliveryStore(Protocol):
    """The delivery ledger (final replies kept until they reach the person) and the journal of
    turns in flight (what a restart finds cut off)."""

    async def ledger_put(self, entry: DeliveryEntry, *, closes_turn: str | None = None) -> None:
        """Keep `entry` until `ledger_done`. With `closes_turn`, that journalled turn is closed in
        the same atomic write: a crash finds either the turn in flight or its final text, never
        both, so a restart neither repeats nor loses the answer."""
        ...

    async def ledger_done(self, entry_id: str) -> None: ...

    async def ledger_pending(self) -> list[DeliveryEntry]:
        """Undelivered entries, oldest first."""
        ...

    async def ledger_attempted(self, entry_id: str) -> None: ...

    async def journal_open(self, entry: JournalEntry, ttl: float) -> None: ...

    async def journal_close(self, turn_id: str) -> None:
        """Remove the turn from the journal; closing an unknown or closed turn does nothing."""
        ...

    async def journal_open_turns(self) -> list[JournalEntry]:
        """Turns still in flight, oldest first."""
        ...


class SessionHistoryStore(Protocol):
    """Each conversation's agent sessions, for `/sessions` and `/resume`."""

    async def history_record(self, key: ConversationKey, record: SessionRecord) -> None:
        """The conversation uses `record`'s session now: added, or its `last_used` (and title,
        when `record` has one) updated; `created` stays the first one's. Only the
        `MAX_SESSION_HISTORY` most recently used per conversation are kept."""
        ...

    async def history_title(self, session_id: str, title: str) -> None:
        """The agent's new title for a session, wherever it was recorded."""
        ...

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        """The conversation's sessions in `project`, most recently used first."""
        ...

    async def history_owners(self, session_id: str) -> list[ConversationKey]:
        """Every conversation that recorded the session."""
        ...


class AuditStore(Protocol):
    """The audit log's records (bot/audit.py), pruned by age."""

    async def audit_put(self, record: AuditRecord, keep: float) -> None:
        """Keep `record`; records older than `keep` seconds are pruned."""
        ...

    async def audit_since(self, since: float) -> list[AuditRecord]:
        """The records at or after `since` (epoch seconds), oldest first."""
        ...

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        """The newest `limit` records, newest first."""
        ...


class StoreHealth(Protocol):
    """Where the store is (redacted, for messages), whether it takes writes, and its end."""

    location: str

    async def check_writable(self) -> None:
        """Raise StoreError unless a write succeeds."""
        ...

    async def aclose(self) -> None: ...


class StateStore(
    BindingStore,
    ConversationSettings,
    EventClaims,
    ApprovalStore,
    DeliveryStore,
    SessionHistoryStore,
    AuditStore,
    StoreHealth,
    Protocol,
):
    """Everything the bot keeps that must outlive a turn or a restart."""
