"""What only some stores can do, each a runtime-checkable Protocol: a caller asks once, with
`isinstance`, when it starts (not on every call), and a store that lacks the ability is simply
used without it.

- `FencedStore`: a conversation's writes carry the fencing token of the lease this replica holds
  for it (the Redis store; bot/routing.py sets `fence_of` when replicas coordinate).
- `StoreWrapper`: a store around another (`OutageTolerantStore`); `inner` is the one it wraps,
  for what must reach the backend itself (the fence, the cluster's connection).
- `BackgroundWriter`: a store with writes of its own to make while the app runs (`run`, owned by
  the app's task group until cancelled).
- `ScriptingStore`: a store whose server runs Lua scripts and raw commands for the cluster
  (bot/redis_cluster.py shares the Redis store's connection this way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from bot.conversation import ConversationKey
from bot.store.protocols import StateStore

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = [
    "BackgroundWriter",
    "Fence",
    "FencedStore",
    "ScriptingStore",
    "StoreWrapper",
    "inner_store",
]

T = TypeVar("T")

Fence = Callable[[ConversationKey], tuple[str, str] | None]


@runtime_checkable
class FencedStore(Protocol):
    """`fence_of(key)`: the lease a conversation's writes are fenced with, as (lease name,
    token), or None for an unfenced write."""

    fence_of: Fence


@runtime_checkable
class StoreWrapper(Protocol):
    inner: StateStore


@runtime_checkable
class BackgroundWriter(Protocol):
    async def run(self) -> None:
        """Make the store's own writes as they come; runs until cancelled."""
        ...


@runtime_checkable
class ScriptingStore(Protocol):
    async def script(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the Lua `source` on the store's server; its errors are `StoreError`s."""
        ...

    async def call(self, op: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run `op` on the store's client; its errors are `StoreError`s."""
        ...


def inner_store(store: StateStore) -> StateStore:
    """The backend itself: what `store` wraps, or `store`."""
    return store.inner if isinstance(store, StoreWrapper) else store
