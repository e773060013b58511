"""`RedisConnection`: the Redis state store's client, and redis-py's failures as ours.

The client (and its connection pool) is made on first use, in the running event loop, and ended
by `aclose`. Every call is shielded: a round trip cancelled halfway would leave the connection
out of step and the caller unsure whether the write happened.

Failures are translated once, here (`_translated`): no answer (refused, reset, timed out) becomes
`StoreUnavailable`, worth waiting for (bot/store/outage.py does); a server out of memory (`OOM`)
or unable to save to its disk (`MISCONF`) becomes `StoreFull`; a refused password, an untrusted
TLS certificate or a bad reply become `StoreError`. Either's location is the URL with its password
replaced by `***`, and no reason quotes redis-py's text where it could hold the URL. redis-py
reconnects by itself: a failed connection is dropped from the pool and the next call opens a new
one; its own retries are cut to one immediate retry on a fresh connection (a pooled connection a
restarted server closed), so a call's time is bounded by `TIMEOUT` and the outage policy is ours.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import AuthenticationWrongNumberOfArgsError as RedisAuthArgsError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.conversation import ConversationKey
from bot.store.errors import LeaseLost, StoreError, StoreFull, StoreUnavailable
from bot.store.redis_scripts import FENCE, LEASE_LOST

__all__ = ["PREFIX", "TIMEOUT", "RedisConnection", "redacted_url"]

T = TypeVar("T")

PREFIX = "switchboard:"  # every key of ours starts with it
TIMEOUT = 5.0  # seconds to connect, and for one reply


def redacted_url(url: str) -> str:
    """The URL with its password (if any) replaced by `***`: what logs and messages show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class RedisConnection:
    """The client of the Redis server `url` names; `location` is the URL as shown."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.location = redacted_url(url)
        self._client: aioredis.Redis | None = None
        self._closed = False

    def _redis(self) -> aioredis.Redis:
        if self._closed:
            raise StoreError(self.location, "the store is closed")
        if self._client is None:
            try:
                self._client = aioredis.Redis.from_url(
                    self._url,
                    socket_timeout=TIMEOUT,
                    socket_connect_timeout=TIMEOUT,
                    retry=_one_fresh_connection(),
                    decode_responses=True,
                )
            except ValueError:  # a malformed URL; its text may quote the password, so not shown
                raise StoreError(
                    self.location, "the Redis URL in SWITCHBOARD_STATE is malformed"
                ) from None
        return self._client

    async def call(self, op: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        client = self._redis()
        # Shielded like the SQLite store's calls: a round trip cancelled halfway would leave the
        # connection out of step and the caller unsure whether the write happened.
        with anyio.CancelScope(shield=True):
            try:
                result = await op(client)
            except Exception as exc:
                error = _translated(exc, self.location)
                if error is exc:
                    raise
                raise error from exc
        return result

    async def script(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        async def op(client: aioredis.Redis) -> Any:
            return await client.eval(source, len(keys), *keys, *args)

        return await self.call(op)

    async def fenced(
        self,
        key: ConversationKey,
        fence: tuple[str, str] | None,
        source: str,
        keys: Sequence[str],
        args: Sequence[Any],
    ) -> Any:
        """The script `source`, a write of `key`'s conversation, run only while `fence` (the
        lease this replica holds it with, as (name, token); None: unfenced) is current, else
        refused with `LeaseLost`: the check and the write in one script, so no other holder can
        come between."""
        lease, want = (
            (f"{PREFIX}lease-meta:{fence[0]}", fence[1]) if fence else (f"{PREFIX}lease-meta:", "")
        )
        lost = False

        async def op(client: aioredis.Redis) -> Any:
            nonlocal lost
            try:
                return await client.eval(FENCE + source, len(keys) + 1, *keys, lease, *args, want)
            except redis.exceptions.ResponseError as exc:
                if LEASE_LOST not in str(exc):
                    raise
                lost = True
                return None

        result = await self.call(op)
        if lost:
            raise LeaseLost(self.location, key)
        return result

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._closed = True
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# -- connection plumbing: retries, and redis-py's errors as ours -----------------------------


def _one_fresh_connection() -> Retry:
    """redis-py's retry policy for our client: a connection error is retried once at once (on a
    new connection), a timeout never, so no call waits more than about `TIMEOUT` twice."""
    return Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))


def _untrusted_certificate(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _translated(exc: Exception, location: str) -> Exception:
    """One of redis-py's (or the socket's) errors as a `StoreError`; anything else unchanged."""
    if isinstance(exc, (RedisAuthenticationError, RedisAuthArgsError)):
        return StoreError(
            location, "Redis refused the user name or password given in SWITCHBOARD_STATE"
        )
    if isinstance(exc, (RedisConnectionError, OSError)) and _untrusted_certificate(exc):
        return StoreError(
            location,
            "the Redis server's TLS certificate is not trusted;"
            " give its CA in SWITCHBOARD_STATE as ?ssl_ca_certs=/path",
        )
    if isinstance(exc, RedisTimeoutError):
        return StoreUnavailable(location, f"the Redis server gave no answer within {TIMEOUT:g} s")
    if isinstance(exc, (RedisConnectionError, OSError)):
        return StoreUnavailable(
            location, "the Redis server cannot be reached; check SWITCHBOARD_STATE"
        )
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return StoreFull(location, _reason(exc), room="the Redis server is out of memory")
    if isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("MISCONF"):
        return StoreFull(location, _reason(exc), room="the Redis server cannot save to its disk")
    if isinstance(exc, redis.exceptions.RedisError):
        return StoreError(location, _reason(exc))
    return exc
