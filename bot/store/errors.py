"""What the state store raises: `StoreError` and its kinds, each carrying the store's (redacted)
`location` and a `reason` as attributes. Every backend translates its own failures into these
where it meets them."""

from __future__ import annotations

from bot.conversation import ConversationKey

__all__ = ["LeaseLost", "StoreError", "StoreFull", "StoreUnavailable"]


class StoreError(Exception):
    """The state store cannot be opened, read or written."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"The state store at {location} cannot be used: {reason}")


class LeaseLost(StoreError):
    """A write for a conversation whose lease this replica no longer holds (it expired and
    another replica took the conversation): the write is refused, and the turn that made it
    stops without writing anything more (bot/cluster.py)."""

    def __init__(self, location: str, key: ConversationKey) -> None:
        self.key = key
        super().__init__(location, f"another replica now serves {key}")


class StoreUnavailable(StoreError):
    """The state store cannot be reached or gave no answer in time, as distinct from an answer
    that refuses (a wrong password, a bad reply): worth waiting for, since it may come back.
    `location` is already redacted."""


class StoreFull(StoreError):
    """The store answered but has no room to write: its disk is full (SQLite), or the Redis
    server is out of memory or cannot save to its own disk. Nothing new can be recorded until an
    operator makes room; `room` says which, in words the person can be told."""

    def __init__(self, location: str, reason: str, *, room: str = "the disk is full") -> None:
        self.room = room
        super().__init__(location, reason)
