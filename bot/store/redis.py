"""The shared state store (issue 16): `StateStore` on a Redis server, selected by
`SWITCHBOARD_STATE=redis://host:port/db` (or `rediss://`, with a password).

Every key starts with `switchboard:`; every value is JSON. Each call is one round trip: a plain
command, a `MULTI` (several writes that read nothing), or a Lua script where a call reads and then
writes (bot/store/redis_scripts.py). The client and the translation of redis-py's failures into
`StoreError`s are bot/store/redis_connection.py.

Expiry: the instant an item expires is computed with the injected `clock` and stored in the value,
and scripts compare it with the `now` the caller passes, so an expired item behaves as if absent
exactly as in the SQLite store. Redis' own key expiry (`PX`, a grace longer than the TTL) only
collects the garbage; it never decides.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis

import bot.store.redis_scripts as lua
from bot.conversation import Binding, ConversationKey
from bot.store.abilities import Fence
from bot.store.errors import StoreError
from bot.store.records import (
    MAX_SESSION_HISTORY,
    ApprovalRecord,
    AuditRecord,
    DeliveryEntry,
    JournalEntry,
    SessionRecord,
)
from bot.store.redis_connection import PREFIX, RedisConnection

__all__ = ["RedisStateStore"]

T = TypeVar("T")

GC_GRACE_MS = 60_000  # Redis drops an expired item this long after its logical expiry


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


class RedisStateStore:
    """`StateStore` on Redis. `url` is what `SWITCHBOARD_STATE` says; nothing is connected
    until first use. `clock` (wall-clock seconds) decides expiry; it is injectable for tests.
    A `FencedStore` and a `ScriptingStore` (bot/store/abilities.py)."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        self._redis = RedisConnection(url)
        self.location = self._redis.location
        self._clock = clock
        # The lease a conversation's writes are fenced with: (lease name, token), or None;
        # set by the app when replicas coordinate (bot/cluster.py, bot/redis_cluster.py).
        self.fence_of: Fence = lambda key: None

    async def _fenced(
        self, key: ConversationKey, source: str, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """A write of `key`'s conversation: refused with `LeaseLost` when this replica holds a
        lease for it that is no longer current."""
        return await self._redis.fenced(key, self.fence_of(key), source, keys, args)

    # -- for bot/redis_cluster.py, which shares this connection ----------------------------------

    async def script(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await self._redis.script(source, keys, args)

    async def call(self, op: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        return await self._redis.call(op)

    # -- bindings ---------------------------------------------------------------------------

    async def get_binding(self, key: ConversationKey) -> Binding | None:
        raw = await self._redis.call(lambda r: r.get(f"{PREFIX}binding:{_conv(key)}"))
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
        await self._fenced(key, lua.SET, [f"{PREFIX}binding:{_conv(key)}"], [value])

    async def delete_binding(self, key: ConversationKey) -> None:
        await self._fenced(key, lua.DEL, [f"{PREFIX}binding:{_conv(key)}"], [])

    # -- place bindings ---------------------------------------------------------------------

    async def get_place(self, place: ConversationKey) -> str | None:
        raw = await self._redis.call(lambda r: r.get(f"{PREFIX}place:{_conv(place)}"))
        return None if raw is None else str(json.loads(raw))

    async def put_place(self, place: ConversationKey, project: str) -> None:
        await self._redis.call(
            lambda r: r.set(f"{PREFIX}place:{_conv(place)}", json.dumps(project))
        )

    async def delete_place(self, place: ConversationKey) -> None:
        await self._redis.call(lambda r: r.delete(f"{PREFIX}place:{_conv(place)}"))

    # -- a conversation's own settings: one hash per conversation, a field per name ---------

    async def conversation_setting(self, key: ConversationKey, name: str) -> str | None:
        raw = await self._redis.call(lambda r: r.hget(f"{PREFIX}settings:{_conv(key)}", name))
        return None if raw is None else str(json.loads(raw))

    async def set_conversation_setting(
        self, key: ConversationKey, name: str, value: str | None
    ) -> None:
        hash_key = f"{PREFIX}settings:{_conv(key)}"
        if value is None:
            await self._redis.call(lambda r: r.hdel(hash_key, name))
        else:
            await self._redis.call(lambda r: r.hset(hash_key, name, json.dumps(value)))

    # -- de-duplication ---------------------------------------------------------------------

    async def claim_event(self, event_key: str, ttl: float, *, claimant: str = "") -> bool:
        now = self._clock()
        won = await self._redis.script(
            lua.CLAIM,
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
            await self._redis.call(op)

    async def take_approval(self, token: str) -> ApprovalRecord | None:
        raw = await self._redis.script(
            lua.TAKE,
            [f"{PREFIX}approval:{token}"],
            [repr(self._clock()), f"{PREFIX}approval:", f"{PREFIX}approval-group:"],
        )
        return _approval(json.loads(raw)) if raw else None

    async def drop_approvals(self, group: str) -> None:
        await self._redis.script(
            lua.DROP, [f"{PREFIX}approval-group:{group}"], [f"{PREFIX}approval:"]
        )

    async def approval_shown(self, group: str, message: str) -> None:
        keys, args = [f"{PREFIX}approval-group:{group}"], [f"{PREFIX}approval:", message]
        await self._redis.script(lua.SHOWN, keys, args)

    async def approvals_pending(self) -> list[ApprovalRecord]:
        async def op(client: aioredis.Redis) -> list[Any]:
            keys = [key async for key in client.scan_iter(match=f"{PREFIX}approval:*", count=500)]
            return list(await client.mget(keys)) if keys else []

        now = self._clock()
        records = [json.loads(raw) for raw in await self._redis.call(op) if raw]
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
            lua.LEDGER_PUT,
            [
                f"{PREFIX}ledger",
                f"{PREFIX}ledger:seq",
                f"{PREFIX}journal",
                f"{PREFIX}journal:expiry",
            ],
            [entry.entry_id, json.dumps(value), closes_turn or ""],
        )

    async def ledger_done(self, entry_id: str) -> None:
        await self._redis.call(lambda r: r.hdel(f"{PREFIX}ledger", entry_id))

    async def ledger_pending(self) -> list[DeliveryEntry]:
        rows = await self._redis.call(lambda r: r.hgetall(f"{PREFIX}ledger"))
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
        await self._redis.script(lua.LEDGER_ATTEMPTED, [f"{PREFIX}ledger"], [entry_id])

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
            lua.JOURNAL_OPEN,
            [f"{PREFIX}journal", f"{PREFIX}journal:seq", f"{PREFIX}journal:expiry"],
            [repr(now), entry.turn_id, json.dumps(value)],
        )

    async def journal_close(self, turn_id: str) -> None:
        await self._redis.script(
            lua.JOURNAL_CLOSE, [f"{PREFIX}journal", f"{PREFIX}journal:expiry"], [turn_id]
        )

    async def journal_open_turns(self) -> list[JournalEntry]:
        live = await self._redis.script(
            lua.JOURNAL_LIVE,
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
        await self._redis.script(
            lua.HISTORY_RECORD,
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
        await self._redis.script(
            lua.HISTORY_TITLE,
            [f"{PREFIX}history-owners:{session_id}"],
            [session_id, title, f"{PREFIX}history:"],
        )

    async def history_of(self, key: ConversationKey, project: str) -> list[SessionRecord]:
        rows = await self._redis.call(lambda r: r.hgetall(f"{PREFIX}history:{_conv(key)}"))
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
        owners = await self._redis.call(
            lambda r: r.smembers(f"{PREFIX}history-owners:{session_id}")
        )
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
        await self._redis.script(
            lua.AUDIT_PUT,
            [f"{PREFIX}audit", f"{PREFIX}audit:seq"],
            [repr(self._clock() - keep), repr(record.at), json.dumps(value, sort_keys=True)],
        )

    async def audit_since(self, since: float) -> list[AuditRecord]:
        members = await self._redis.call(
            lambda r: r.zrangebyscore(f"{PREFIX}audit", repr(since), "+inf")
        )
        return [_audit(member) for member in members]

    async def audit_latest(self, limit: int) -> list[AuditRecord]:
        if limit <= 0:  # ZREVRANGE 0 -1 would be every record
            return []
        members = await self._redis.call(lambda r: r.zrevrange(f"{PREFIX}audit", 0, limit - 1))
        return [_audit(member) for member in members]

    # -- health and shutdown ----------------------------------------------------------------

    async def check_writable(self) -> None:
        await self._redis.call(lambda r: r.set(f"{PREFIX}meta:checked", "ok"))

    async def aclose(self) -> None:
        await self._redis.aclose()


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
