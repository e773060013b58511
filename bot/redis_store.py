"""The shared state store (issue 16): `StateStore` on a Redis server, selected by
`SWITCHBOARD_STATE=redis://host:port/db` (or `rediss://`, with a password).

Every key starts with `switchboard:`; every value is JSON. Each call is one round trip: a plain
command, a `MULTI` (several writes that read nothing), or a Lua script where a call reads and then
writes (Redis runs a script alone, so two replicas never interleave inside one).

Expiry: the instant an item expires is computed with the injected `clock` and stored in the value,
and scripts compare it with the `now` the caller passes, so an expired item behaves as if absent
exactly as in the SQLite store. Redis' own key expiry (`PX`, a grace longer than the TTL) only
collects the garbage; it never decides.

Scripts write before they delete: Redis does not roll a script back, so a write that fails (say a
key of the wrong type) stops the script before anything is removed, e.g. `ledger_put` leaves the
turn it would close open.

Failures are translated once, here (`_translated`): no answer (refused, reset, timed out) becomes
`StoreUnavailable`, worth waiting for (bot/store_outage.py does); a server out of memory (`OOM`) or
unable to save to its disk (`MISCONF`) becomes `StoreFull`; a refused password, an untrusted
TLS certificate or a bad reply become `StoreError`. Either's location is the URL with its password
replaced by `***`, and no reason quotes redis-py's text where it could hold the URL. redis-py
reconnects by itself: a failed connection is dropped from the pool and the next call opens a new
one; its own retries are cut to one immediate retry on a fresh connection (a pooled connection a
restarted server closed), so a call's time is bounded by `TIMEOUT` and the outage policy is ours.
"""

from __future__ import annotations

import json
import math
import ssl
import time
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

from bot.conversation import Binding, ConversationKey
from bot.store import (
    MAX_SESSION_HISTORY,
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    LeaseLost,
    SessionRecord,
    StoreError,
    StoreFull,
    StoreUnavailable,
)

__all__ = ["PREFIX", "RedisStateStore", "redacted_url"]

T = TypeVar("T")

PREFIX = "switchboard:"
GC_GRACE_MS = 60_000  # Redis drops an expired item this long after its logical expiry
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


def _conv(key: ConversationKey) -> str:
    # JSON, not "a:b:c": a chat or thread id may itself contain a colon.
    return json.dumps([key.surface, key.chat, key.thread])


def _key_of(raw: object) -> ConversationKey:
    surface, chat, thread = json.loads(_text(raw))
    return ConversationKey(str(surface), str(chat), str(thread))


def _approval(r: dict[str, Any]) -> ApprovalRecord:
    surface, chat, thread = r["key"]
    return ApprovalRecord(
        str(r["token"]),
        str(r["group"]),
        str(r["option_id"]),
        str(r["requester"]),
        ConversationKey(str(surface), str(chat), str(thread)),
        float(r["created"]),
        str(r.get("replica", "")),
        str(r.get("message", "")),
    )


def _px(ttl: float) -> int:
    return max(1, math.ceil(ttl * 1000)) + GC_GRACE_MS


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# Prepended to a conversation's writes: the last key is the conversation's lease meta (see
# bot/redis_cluster.py), the last argument the fencing token this replica holds it with ("" when
# it holds none: the write is unfenced). Refused when another replica took the lease since (a
# larger token); checked in the same script as the write, so no other holder can come between.
LEASE_LOST = "SWITCHBOARD_LEASE_LOST"
_FENCE = f"""
local want = ARGV[#ARGV]
if want ~= '' and redis.call('HGET', KEYS[#KEYS], 'token') ~= want then
  return redis.error_reply('{LEASE_LOST}')
end
"""

_SET = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
_DEL = "redis.call('DEL', KEYS[1]) return 1"

# KEYS[1] event key; ARGV now, expires, px, claimant ("" for none). 1 when claimed (also when
# this claimant claimed it already: a retry whose first answer was lost).
_CLAIM = """
local held = redis.call('GET', KEYS[1])
if held then
  local expires, who = string.match(held, '^([^|]*)|?(.*)$')
  if tonumber(expires) > tonumber(ARGV[1]) then
    if ARGV[4] ~= '' and who == ARGV[4] then return 1 end
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2] .. '|' .. ARGV[4], 'PX', ARGV[3])
return 1
"""

# KEYS[1] token key; ARGV now, approval key prefix, group key prefix. The record's JSON or nil.
_TAKE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local record = cjson.decode(raw)
if tonumber(record['expires']) <= tonumber(ARGV[1]) then return false end
local group = ARGV[3] .. record['group']
for _, token in ipairs(redis.call('SMEMBERS', group)) do
  redis.call('DEL', ARGV[2] .. token)
end
redis.call('DEL', group, KEYS[1])
return raw
"""

# KEYS[1] group key; ARGV approval key prefix.
_DROP = """
for _, token in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. token)
end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS[1] group key; ARGV approval key prefix, the card's message id.
_SHOWN = """
for _, token in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local raw = redis.call('GET', ARGV[1] .. token)
  if raw then
    local record = cjson.decode(raw)
    record['message'] = ARGV[2]
    redis.call('SET', ARGV[1] .. token, cjson.encode(record), 'KEEPTTL')
  end
end
return 1
"""

# KEYS ledger hash, sequence, journal hash, journal expiry index; ARGV entry id, entry JSON
# (no seq), turn id or "" (the turn it closes).
# An upsert that keeps the first write's place in line (`seq`), as SQLite keeps its rowid.
_LEDGER_PUT = """
local entry = cjson.decode(ARGV[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then entry['seq'] = cjson.decode(old)['seq']
else entry['seq'] = redis.call('INCR', KEYS[2]) end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(entry))
if ARGV[3] ~= '' then
  redis.call('HDEL', KEYS[3], ARGV[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
end
return 1
"""

# KEYS ledger hash; ARGV entry id.
_LEDGER_ATTEMPTED = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
local entry = cjson.decode(old)
entry['attempts'] = entry['attempts'] + 1
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(entry))
return 1
"""

# KEYS journal hash, sequence, expiry index (turn ids scored by when they expire); ARGV now, turn
# id, entry JSON (no seq). Also drops expired turns, the oldest 100 at most: a turn start costs
# O(log n), not a scan of every open turn.
_JOURNAL_OPEN = """
local entry = cjson.decode(ARGV[3])
entry['seq'] = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[2], cjson.encode(entry))
redis.call('ZADD', KEYS[3], entry['expires'], ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, turn in ipairs(expired) do
  redis.call('HDEL', KEYS[1], turn)
  redis.call('ZREM', KEYS[3], turn)
end
return 1
"""

# KEYS journal hash, expiry index; ARGV turn id.
_JOURNAL_CLOSE = """
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS journal hash, expiry index; ARGV now. The live entries' JSON; the expired ones removed.
_JOURNAL_LIVE = """
local live = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if tonumber(cjson.decode(all[i + 1])['expires']) <= tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], all[i])
    redis.call('ZREM', KEYS[2], all[i])
  else
    table.insert(live, all[i + 1])
  end
end
return live
"""

# KEYS conversation's history hash, sequence; ARGV session id, record JSON (no seq), owners
# prefix, the conversation (JSON), the bound. Upsert, then keep the `bound` most recently used.
_HISTORY_RECORD = """
local record = cjson.decode(ARGV[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local was = cjson.decode(old)
  record['created'] = was['created']
  if record['title'] == '' then record['title'] = was['title'] end
end
record['seq'] = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(record))
redis.call('SADD', ARGV[3] .. ARGV[1], ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local bound = tonumber(ARGV[5])
if #all / 2 <= bound then return 1 end
local rows = {}
for i = 1, #all, 2 do
  local r = cjson.decode(all[i + 1])
  table.insert(rows, {all[i], tonumber(r['last_used']), tonumber(r['seq'])})
end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[3] > b[3]
end)
for i = bound + 1, #rows do
  redis.call('HDEL', KEYS[1], rows[i][1])
  redis.call('SREM', ARGV[3] .. rows[i][1], ARGV[4])
end
return 1
"""

# KEYS owners set; ARGV session id, title, history prefix.
_HISTORY_TITLE = """
for _, conv in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[3] .. conv
  local old = redis.call('HGET', key, ARGV[1])
  if old then
    local record = cjson.decode(old)
    record['title'] = ARGV[2]
    redis.call('HSET', key, ARGV[1], cjson.encode(record))
  end
end
return 1
"""

# KEYS audit sorted set, sequence; ARGV cutoff, at, record JSON. Pruned first, as in SQLite.
# The member starts with a zero-padded sequence number: equal times keep their insertion order.
_AUDIT_PUT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[2], string.format('%020d', seq) .. ARGV[3])
return 1
"""


class RedisStateStore:
    """`StateStore` on Redis. `url` is what `SWITCHBOARD_STATE` says; the client (and its
    connection pool) is made on first use, in the running event loop, and ended by `aclose`.
    `clock` (wall-clock seconds) decides expiry; it is injectable for tests."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        self._url = url
        self.location = redacted_url(url)
        self._clock = clock
        self._client: aioredis.Redis | None = None
        self._closed = False
        # The lease a conversation's writes are fenced with: (lease name, token), or None;
        # set by the app when replicas coordinate (bot/cluster.py, bot/redis_cluster.py).
        self.fence_of: Callable[[ConversationKey], tuple[str, str] | None] = lambda key: None

    # -- plumbing ---------------------------------------------------------------------------

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

    async def _call(self, op: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
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

    async def _script(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        async def op(client: aioredis.Redis) -> Any:
            return await client.eval(source, len(keys), *keys, *args)

        return await self._call(op)

    async def _fenced(
        self, key: ConversationKey, source: str, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """A write of `key`'s conversation: refused with `LeaseLost` when this replica holds a
        lease for it that is no longer current."""
        fence = self.fence_of(key)
        lease, want = (
            (f"{PREFIX}lease-meta:{fence[0]}", fence[1]) if fence else (f"{PREFIX}lease-meta:", "")
        )
        lost = False

        async def op(client: aioredis.Redis) -> Any:
            nonlocal lost
            try:
                return await client.eval(_FENCE + source, len(keys) + 1, *keys, lease, *args, want)
            except redis.exceptions.ResponseError as exc:
                if LEASE_LOST not in str(exc):
                    raise
                lost = True
                return None

        result = await self._call(op)
        if lost:
            raise LeaseLost(self.location, key)
        return result

    # -- for bot/redis_cluster.py, which shares this connection ----------------------------------

    async def script(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._script(source, keys, args)

    async def call(self, op: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        return await self._call(op)

    # -- bindings ---------------------------------------------------------------------------

    async def get_binding(self, key: ConversationKey) -> Binding | None:
        raw = await self._call(lambda r: r.get(f"{PREFIX}binding:{_conv(key)}"))
        if raw is None:
            return None
        fields = json.loads(raw)
        return Binding(
            str(fields["session_id"]),
            str(fields["backend"]),
            str(fields["workspace"]),
            str(fields["model"]),
            int(fields["generation"]),
            str(fields.get("project", "")),
            str(fields.get("agent", "")),
        )

    async def put_binding(self, key: ConversationKey, binding: Binding) -> None:
        value = json.dumps(
            {
                "session_id": binding.session_id,
                "backend": binding.backend,
                "workspace": binding.workspace,
                "model": binding.model,
                "generation": binding.generation,
                "project": binding.project,
                "agent": binding.agent,
            }
        )
        await self._fenced(key, _SET, [f"{PREFIX}binding:{_conv(key)}"], [value])

    async def delete_binding(self, key: ConversationKey) -> None:
        await self._fenced(key, _DEL, [f"{PREFIX}binding:{_conv(key)}"], [])

    # -- place bindings ---------------------------------------------------------------------

    async def get_place(self, place: ConversationKey) -> str | None:
        raw = await self._call(lambda r: r.get(f"{PREFIX}place:{_conv(place)}"))
        return None if raw is None else str(json.loads(raw))

    async def put_place(self, place: ConversationKey, project: str) -> None:
        await self._call(lambda r: r.set(f"{PREFIX}place:{_conv(place)}", json.dumps(project)))

    async def delete_place(self, place: ConversationKey) -> None:
        await self._call(lambda r: r.delete(f"{PREFIX}place:{_conv(place)}"))

    # -- de-duplication ---------------------------------------------------------------------

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        now = self._clock()
        won = await self._script(
            _CLAIM,
            [f"{PREFIX}event:{event_key}"],
            [repr(now), repr(now + ttl), _px(ttl), claimant],
        )
        return bool(won)

    # -- approvals --------------------------------------------------------------------------

    async def put_approvals(self, records: Sequence[ApprovalRecord], ttl: float) -> None:
        expires = self._clock() + ttl
        px = _px(ttl)

        async def op(client: aioredis.Redis) -> None:
            async with client.pipeline(transaction=True) as tx:
                for r in records:
                    value = {
                        "token": r.token,
                        "group": r.group,
                        "option_id": r.option_id,
                        "requester": r.requester,
                        "key": [r.key.surface, r.key.chat, r.key.thread],
                        "created": r.created,
                        "expires": expires,
                        "replica": r.replica,
                        "message": r.message,
                    }
                    tx.set(f"{PREFIX}approval:{r.token}", json.dumps(value), px=px)
                    tx.sadd(f"{PREFIX}approval-group:{r.group}", r.token)
                    tx.pexpire(f"{PREFIX}approval-group:{r.group}", px)
                await tx.execute()

        if records:
            await self._call(op)

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        raw = await self._script(
            _TAKE,
            [f"{PREFIX}approval:{token}"],
            [repr(self._clock()), f"{PREFIX}approval:", f"{PREFIX}approval-group:"],
        )
        return _approval(json.loads(raw)) if raw else None

    async def drop_approvals(self, group: str) -> None:
        await self._script(_DROP, [f"{PREFIX}approval-group:{group}"], [f"{PREFIX}approval:"])

    async def approval_shown(self, group: str, message: str) -> None:
        keys, args = [f"{PREFIX}approval-group:{group}"], [f"{PREFIX}approval:", message]
        await self._script(_SHOWN, keys, args)

    async def approvals_pending(self) -> list[ApprovalRecord]:
        async def op(client: aioredis.Redis) -> list[Any]:
            keys = [key async for key in client.scan_iter(match=f"{PREFIX}approval:*", count=500)]
            return list(await client.mget(keys)) if keys else []

        now = self._clock()
        records = [json.loads(raw) for raw in await self._call(op) if raw]
        live = [_approval(r) for r in records if float(r["expires"]) > now]
        return sorted(live, key=lambda record: record.created)

    # -- delivery ledger --------------------------------------------------------------------

    async def ledger_put(self, entry: DeliveryEntry, *, closes_turn: str | None = None) -> None:
        value = {
            "entry_id": entry.entry_id,
            "key": [entry.key.surface, entry.key.chat, entry.key.thread],
            "text": entry.text,
            "created": entry.created,
            "attempts": entry.attempts,
            "replica": entry.replica,
        }
        await self._fenced(
            entry.key,
            _LEDGER_PUT,
            [
                f"{PREFIX}ledger",
                f"{PREFIX}ledger:seq",
                f"{PREFIX}journal",
                f"{PREFIX}journal:expiry",
            ],
            [entry.entry_id, json.dumps(value), closes_turn or ""],
        )

    async def ledger_done(self, entry_id: str) -> None:
        await self._call(lambda r: r.hdel(f"{PREFIX}ledger", entry_id))

    async def ledger_pending(self) -> list[DeliveryEntry]:
        rows = await self._call(lambda r: r.hgetall(f"{PREFIX}ledger"))
        entries = [json.loads(raw) for raw in rows.values()]
        entries.sort(key=lambda e: (float(e["created"]), int(e["seq"])))
        return [
            DeliveryEntry(
                str(e["entry_id"]),
                ConversationKey(*(str(part) for part in e["key"])),
                str(e["text"]),
                float(e["created"]),
                int(e["attempts"]),
                str(e.get("replica", "")),
            )
            for e in entries
        ]

    async def ledger_attempted(self, entry_id: str) -> None:
        await self._script(_LEDGER_ATTEMPTED, [f"{PREFIX}ledger"], [entry_id])

    # -- turn journal -----------------------------------------------------------------------

    async def journal_open(self, entry: JournalEntry, ttl: float) -> None:
        now = self._clock()
        value = {
            "turn_id": entry.turn_id,
            "key": [entry.key.surface, entry.key.chat, entry.key.thread],
            "requester": entry.requester,
            "started": entry.started,
            "expires": now + ttl,
            "replica": entry.replica,
            "message": entry.message,
        }
        await self._fenced(
            entry.key,
            _JOURNAL_OPEN,
            [f"{PREFIX}journal", f"{PREFIX}journal:seq", f"{PREFIX}journal:expiry"],
            [repr(now), entry.turn_id, json.dumps(value)],
        )

    async def journal_close(self, turn_id: str) -> None:
        await self._script(
            _JOURNAL_CLOSE, [f"{PREFIX}journal", f"{PREFIX}journal:expiry"], [turn_id]
        )

    async def journal_open_turns(self) -> list[JournalEntry]:
        live = await self._script(
            _JOURNAL_LIVE,
            [f"{PREFIX}journal", f"{PREFIX}journal:expiry"],
            [repr(self._clock())],
        )
        entries = [json.loads(raw) for raw in live]
        entries.sort(key=lambda e: (float(e["started"]), int(e["seq"])))
        return [
            JournalEntry(
                str(e["turn_id"]),
                ConversationKey(*(str(part) for part in e["key"])),
                str(e["requester"]),
                float(e["started"]),
                str(e.get("replica", "")),
                str(e.get("message", "")),
            )
            for e in entries
        ]

    # -- a conversation's agent sessions ------------------------------------------------------

    async def history_record(self, key: ConversationKey, record: SessionRecord) -> None:
        now = self._clock()
        value = {
            "session_id": record.session_id,
            "project": record.project,
            "backend": record.backend,
            "workspace": record.workspace,
            "title": record.title,
            "created": record.created or now,
            "last_used": record.last_used or now,
        }
        await self._script(
            _HISTORY_RECORD,
            [f"{PREFIX}history:{_conv(key)}", f"{PREFIX}history:seq"],
            [
                record.session_id,
                json.dumps(value),
                f"{PREFIX}history-owners:",
                _conv(key),
                MAX_SESSION_HISTORY,
            ],
        )

    async def history_title(self, session_id: str, title: str) -> None:
        await self._script(
            _HISTORY_TITLE,
            [f"{PREFIX}history-owners:{session_id}"],
            [session_id, title, f"{PREFIX}history:"],
        )

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        rows = await self._call(lambda r: r.hgetall(f"{PREFIX}history:{_conv(key)}"))
        records = [json.loads(raw) for raw in rows.values()]
        records = [r for r in records if r["project"] == project]
        records.sort(key=lambda r: (float(r["last_used"]), int(r["seq"])), reverse=True)
        return [
            SessionRecord(
                str(r["session_id"]),
                str(r["project"]),
                str(r["backend"]),
                str(r["workspace"]),
                str(r["title"]),
                float(r["created"]),
                float(r["last_used"]),
            )
            for r in records
        ]

    async def history_owners(self, session_id: str) -> list[ConversationKey]:
        owners = await self._call(lambda r: r.smembers(f"{PREFIX}history-owners:{session_id}"))
        return [_key_of(raw) for raw in sorted(owners)]

    # -- the audit log ----------------------------------------------------------------------

    async def audit_put(self, record: AuditRecord, keep: float) -> None:
        value = {
            "at": record.at,
            "kind": record.kind,
            "surface": record.surface,
            "actor": record.actor,
            "action": record.action,
            "details": record.details,
        }
        await self._script(
            _AUDIT_PUT,
            [f"{PREFIX}audit", f"{PREFIX}audit:seq"],
            [repr(self._clock() - keep), repr(record.at), json.dumps(value, sort_keys=True)],
        )

    async def audit_since(self, since: float) -> list[AuditRecord]:
        members = await self._call(lambda r: r.zrangebyscore(f"{PREFIX}audit", repr(since), "+inf"))
        return [_audit(member) for member in members]

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        if limit <= 0:  # ZREVRANGE 0 -1 would be every record
            return []
        members = await self._call(lambda r: r.zrevrange(f"{PREFIX}audit", 0, limit - 1))
        return [_audit(member) for member in members]

    # -- health and shutdown ----------------------------------------------------------------

    async def check_writable(self) -> None:
        await self._call(lambda r: r.set(f"{PREFIX}meta:checked", "ok"))

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._closed = True
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()


def _audit(member: object) -> AuditRecord:
    """A member of the audit set: a 20-digit sequence number, then the record's JSON."""
    try:
        value = json.loads(_text(member)[20:])
        details = value.get("details", {})
        return AuditRecord(
            float(value["at"]),
            str(value["kind"]),
            str(value["surface"]),
            str(value["actor"]),
            str(value["action"]),
            {str(k): str(v) for k, v in details.items()} if isinstance(details, dict) else {},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(PREFIX + "audit", f"a record is not readable ({exc})") from exc


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
