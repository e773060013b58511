"""`open_store`: the state store the `state` setting names."""

from __future__ import annotations

from bot.store.outage import DEFAULT_STATE_WAIT, OutageTolerantStore
from bot.store.protocols import StateStore
from bot.store.sqlite import SqliteStateStore
from config import ConfigError

__all__ = ["open_store"]


def open_store(location: str, *, wait: float = DEFAULT_STATE_WAIT) -> StateStore:
    """The store named by the `state` setting: a path, `sqlite:///path` (`sqlite:////abs/path`
    for an absolute path, as in SQLAlchemy), `:memory:`, or `redis://host:port/db` (`rediss://`
    for TLS, its CA as `?ssl_ca_certs=/path`; a password as `redis://:password@host`), the shared
    store of bot/store/redis.py, behind `OutageTolerantStore` (bot/store/outage.py): a Redis
    outage of up to `wait` seconds (`SWITCHBOARD_STATE_WAIT`) is waited out. Nothing is opened
    until first use."""
    if location.startswith(("redis://", "rediss://")):
        # Imported only here: a SQLite start never loads the Redis client.
        from bot.store.redis import RedisStateStore

        return OutageTolerantStore(RedisStateStore(location), wait=wait)
    if location.startswith("sqlite:///"):
        location = location.removeprefix("sqlite:///")
    elif "://" in location:
        scheme = location.split("://", 1)[0]
        raise ConfigError(
            "SWITCHBOARD_STATE", f"unknown store scheme {scheme!r}; give a SQLite file path"
        )
    if not location:
        raise ConfigError("SWITCHBOARD_STATE", "empty; give a SQLite file path")
    return SqliteStateStore(location)
