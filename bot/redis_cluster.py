"""`Cluster` on the Redis server of the Redis state store (bot/cluster.py says what it is for;
bot/cluster_choice.py builds it for a Redis store).

Keys, beside the store's (all under `switchboard:`):
- `replicas`: a sorted set, each replica scored by its last heartbeat (Redis' own clock, in ms);
  a replica is alive while its score is within the lease TTL.
- `lease:<name>`: `"<replica>|<token>"`, expiring with Redis' `PX` (the TTL, renewed by the
  holder's heartbeat); `lease-meta:<name>`: the last token handed out and the last holder, so a
  new holder gets a larger token and learns whether the lease moved. The fencing check compares
  a write's token with the meta's: a write is refused once anyone else took the lease, and only
  then (a lease that merely expired, say during a Redis outage, is taken again by its holder).
- `relay:<replica>`: a list of events other replicas handed to this one.

Every call that reads and writes is a Lua script (Redis runs it alone), so two replicas never
both take one lease or both adopt one dead replica's events. Time is read inside the scripts
(`TIME`), never from a replica's clock: replicas' clocks may disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.cluster import Lease
from bot.store import ScriptingStore
from bot.store.redis_connection import PREFIX

__all__ = ["RedisCluster"]

META_PX = 30 * 24 * 3600 * 1000  # a conversation's token history outlives any lease by far
RELAY_PX = 24 * 3600 * 1000  # events relayed to a replica that never reads them go after a day
RELAY_BATCH = 100

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS lease, meta; ARGV replica, px. {1, token, moved} or {0, holder}.
_ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then
  local owner, token = string.match(held, '^(.*)|(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(token), 0}
  end
  return {0, owner or ''}
end
local token = redis.call('HINCRBY', KEYS[2], 'token', 1)
local last = redis.call('HGET', KEYS[2], 'last')
redis.call('HSET', KEYS[2], 'last', ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
if last and last ~= ARGV[1] then return {1, token, 1} end
return {1, token, 0}
"""

# KEYS lease; ARGV replica. Deletes the lease only if this replica holds it (any token).
_RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.match(held, '^(.*)|%d+$') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS replicas, then lease and meta of each lease; ARGV replica, px, token... The 1-based
# indexes of the leases lost. A lease that expired (a Redis outage, a pause) but was taken by
# nobody since (its meta still has this token) is taken again with the same token.
_BEAT = (
    _NOW_MS
    + """
redis.call('ZADD', KEYS[1], now, ARGV[1])
local lost = {}
for i = 1, (#KEYS - 1) / 2 do
  local lease, meta, token = KEYS[2 * i], KEYS[2 * i + 1], ARGV[i + 2]
  local want = ARGV[1] .. '|' .. token
  local held = redis.call('GET', lease)
  if held == want then redis.call('PEXPIRE', lease, ARGV[2])
  elseif not held and redis.call('HGET', meta, 'token') == token then
    redis.call('SET', lease, want, 'PX', ARGV[2])
  else table.insert(lost, i) end
end
return lost
"""
)

# KEYS replicas, relay list of the target; ARGV target, ttl ms, payload, relay px.
_RELAY = (
    _NOW_MS
    + """
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not seen or tonumber(seen) < now - tonumber(ARGV[2]) then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""
)

# KEYS replicas; ARGV ttl ms, "alive" or "dead".
_MEMBERS = (
    _NOW_MS
    + """
local cutoff = now - tonumber(ARGV[1])
if ARGV[2] == 'alive' then return redis.call('ZRANGEBYSCORE', KEYS[1], cutoff, '+inf') end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. cutoff)
"""
)

# KEYS replicas, relay list of the dead one; ARGV dead, ttl ms. Its events, once.
_ADOPT = (
    _NOW_MS
    + """
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if seen and tonumber(seen) >= now - tonumber(ARGV[2]) then return {} end
local items = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return items
"""
)


def _lease_key(name: str) -> str:
    return f"{PREFIX}lease:{name}"


def _meta_key(name: str) -> str:
    return f"{PREFIX}lease-meta:{name}"


class RedisCluster:
    """Replicas coordinating through the Redis server `store` uses (its connection too: the
    Redis state store is a `ScriptingStore`)."""

    shared = True

    def __init__(self, store: ScriptingStore, replica: str, ttl: float) -> None:
        self._store = store
        self.replica = replica
        self.ttl = ttl
        self._ttl_ms = max(1, round(ttl * 1000))
        self._relay_key = f"{PREFIX}relay:{replica}"

    async def acquire(self, name: str) -> Lease | str:
        got: list[Any] = await self._store.script(
            _ACQUIRE,
            [_lease_key(name), _meta_key(name)],
            [self.replica, self._ttl_ms, META_PX],
        )
        if int(got[0]) == 1:
            return Lease(name, int(got[1]), moved=int(got[2]) == 1)
        return str(got[1])

    async def release(self, lease: Lease) -> None:
        await self._store.script(_RELEASE, [_lease_key(lease.name)], [self.replica])

    async def beat(self, leases: Sequence[Lease]) -> set[str]:
        keys = [f"{PREFIX}replicas"]
        for lease in leases:
            keys += [_lease_key(lease.name), _meta_key(lease.name)]
        args = [self.replica, self._ttl_ms, *(lease.token for lease in leases)]
        lost = await self._store.script(_BEAT, keys, args)
        return {leases[int(index) - 1].name for index in lost}

    async def relay(self, replica: str, payload: str) -> bool:
        keys = [f"{PREFIX}replicas", f"{PREFIX}relay:{replica}"]
        sent = await self._store.script(_RELAY, keys, [replica, self._ttl_ms, payload, RELAY_PX])
        return int(sent) == 1

    async def relayed(self, wait: float) -> list[str]:
        key = self._relay_key
        first = await self._store.call(lambda r: r.blpop([key], timeout=wait))
        if first is None:
            return []
        rest = await self._store.call(lambda r: r.lpop(key, RELAY_BATCH))
        return [str(first[1]), *(str(item) for item in rest or ())]

    async def dead_replicas(self) -> list[str]:
        dead = await self._store.script(_MEMBERS, [f"{PREFIX}replicas"], [self._ttl_ms, "dead"])
        return [str(replica) for replica in dead]

    async def alive(self) -> list[str]:
        alive = await self._store.script(_MEMBERS, [f"{PREFIX}replicas"], [self._ttl_ms, "alive"])
        return sorted(str(replica) for replica in alive)

    async def adopt(self, dead: str) -> list[str]:
        keys = [f"{PREFIX}replicas", f"{PREFIX}relay:{dead}"]
        items = await self._store.script(_ADOPT, keys, [dead, self._ttl_ms])
        return [str(item) for item in items]

    async def aclose(self) -> None:
        """Leave the cluster at once (a clean stop): scored as long dead, so the others adopt
        what is left of this replica without waiting for the TTL."""
        await self._store.call(lambda r: r.zadd(f"{PREFIX}replicas", {self.replica: 0}))
