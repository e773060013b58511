"""The Lua scripts of the Redis state store (bot/store/redis.py): each call that reads and then
writes is one script, which Redis runs alone, so two replicas never interleave inside one.

Scripts write before they delete: Redis does not roll a script back, so a write that fails (say a
key of the wrong type) stops the script before anything is removed, e.g. `LEDGER_PUT` leaves the
turn it would close open.
"""

from __future__ import annotations

__all__ = [
    "AUDIT_PUT",
    "CLAIM",
    "DEL",
    "DROP",
    "FENCE",
    "HISTORY_RECORD",
    "HISTORY_TITLE",
    "JOURNAL_CLOSE",
    "JOURNAL_LIVE",
    "JOURNAL_OPEN",
    "LEASE_LOST",
    "LEDGER_ATTEMPTED",
    "LEDGER_PUT",
    "SET",
    "SHOWN",
    "TAKE",
]

# Prepended to a conversation's writes: the last key is the conversation's lease meta (see
# bot/redis_cluster.py), the last argument the fencing token this replica holds it with ("" when
# it holds none: the write is unfenced). Refused when another replica took the lease since (a
# larger token); checked in the same script as the write, so no other holder can come between.
LEASE_LOST = "SWITCHBOARD_LEASE_LOST"
FENCE = f"""
local want = ARGV[#ARGV]
if want ~= '' and redis.call('HGET', KEYS[#KEYS], 'token') ~= want then
  return redis.error_reply('{LEASE_LOST}')
end
"""

SET = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
DEL = "redis.call('DEL', KEYS[1]) return 1"

# KEYS[1] event key; ARGV now, expires, px, claimant ("" for none). 1 when claimed (also when
# this claimant claimed it already: a retry whose first answer was lost).
CLAIM = """
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
TAKE = """
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
DROP = """
for _, token in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. token)
end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS[1] group key; ARGV approval key prefix, the card's message id.
SHOWN = """
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
LEDGER_PUT = """
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
LEDGER_ATTEMPTED = """
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
JOURNAL_OPEN = """
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
JOURNAL_CLOSE = """
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS journal hash, expiry index; ARGV now. The live entries' JSON; the expired ones removed.
JOURNAL_LIVE = """
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
HISTORY_RECORD = """
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
HISTORY_TITLE = """
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
AUDIT_PUT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[2], string.format('%020d', seq) .. ARGV[3])
return 1
"""
