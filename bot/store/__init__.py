"""The state store: what must outlive a turn or a restart (conversation bindings and place
bindings, each conversation's own settings, inbound de-duplication keys, pending approval tokens,
the delivery ledger, the journal of turns in flight, each conversation's agent sessions, the
audit log).

The package's interface is what this module exports:

- `records`: the dataclasses every backend reads and writes; `errors`: `StoreError` and its kinds;
- `protocols`: one Protocol per concern, `StateStore` the union of them, the seam the bot is
  written against; `abilities`: what only some stores can do (`FencedStore`, `StoreWrapper`,
  `BackgroundWriter`, `ScriptingStore`), checked once with `isinstance`;
- `sqlite` (with `sqlite_thread`, `sqlite_schema`, `sqlite_file`): the embedded store;
- `redis` (with `redis_connection`, `redis_scripts`): the shared one, imported only for a
  `redis://` state, so a SQLite start never loads the Redis client;
- `outage` (with `kept_writes`): `OutageTolerantStore`, what a Redis store runs behind;
  `opening`: `open_store`.
"""

from bot.store.abilities import (
    BackgroundWriter,
    FencedStore,
    ScriptingStore,
    StoreWrapper,
    inner_store,
)
from bot.store.errors import LeaseLost, StoreError, StoreFull, StoreUnavailable
from bot.store.opening import open_store
from bot.store.outage import OutageTolerantStore
from bot.store.protocols import (
    ApprovalStore,
    AuditStore,
    BindingStore,
    ConversationSettings,
    DeliveryStore,
    EventClaims,
    SessionHistoryStore,
    StateStore,
    StoreHealth,
)
from bot.store.records import (
    MAX_SESSION_HISTORY,
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    SessionRecord,
)
from bot.store.sqlite import SqliteStateStore

__all__ = [
    "MAX_SESSION_HISTORY",
    "ApprovalRecord",
    "ApprovalStore",
    "AuditRecord",
    "AuditStore",
    "BackgroundWriter",
    "BindingStore",
    "ConversationSettings",
    "DeliveryEntry",
    "DeliveryStore",
    "EventClaims",
    "FencedStore",
    "JournalEntry",
    "LeaseLost",
    "OutageTolerantStore",
    "ScriptingStore",
    "SessionHistoryStore",
    "SessionRecord",
    "SqliteStateStore",
    "StateStore",
    "StoreError",
    "StoreFull",
    "StoreHealth",
    "StoreUnavailable",
    "StoreWrapper",
    "inner_store",
    "open_store",
]
