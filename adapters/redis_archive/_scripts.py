"""The Lua scripts of the Redis run archive: the writes that must be atomic, one round trip each.

A script runs on the server without interleaving with any other command, so a journal batch,
the window's eviction, the journal's new state and the audit records it changed land together
or (when the guard refuses) not at all. The scripts only carry out what `_layout` decided; they
decide nothing about retention. Each returns an error reply starting with an upper-case word
(`CONFLICT`, `EXISTS`) for the refusals the archive tells apart.

Every script that writes also writes the namespace's format marker when it is missing (its last
KEY is `{ns}:meta`): a Redis restarted empty under running nodes gets the marker back with their
first write, so a node opening the namespace later finds it marked, not keys without a marker.
"""

from __future__ import annotations

from typing import Final

from adapters.redis_archive._layout import FORMAT_NAME, VERSION_TEXT

__all__ = [
    "APPEND",
    "CLAIM_NAMESPACE",
    "CLAIM_NODE",
    "OPEN_RUN",
    "QUEUE_COMMAND",
    "RECORD_RESULTS",
    "RENEW_LEASE",
]

#: Write the format marker into KEYS[#KEYS] (the namespace's meta hash) unless there is one.
_MARK: Final = f"""
local function mark()
  local meta = KEYS[#KEYS]
  if redis.call('EXISTS', meta) == 0 then
    redis.call('HSET', meta, 'name', '{FORMAT_NAME}', 'version', '{VERSION_TEXT}')
  end
end
"""

#: Keep one delegation's record in a hash and its first-write order in a sorted set.
_PUT_ORDERED: Final = """
local function put_ordered(hash, order, field, value)
  redis.call('HSET', hash, field, value)
  if not redis.call('ZSCORE', order, field) then
    redis.call('ZADD', order, redis.call('ZCARD', order), field)
  end
end
"""

#: Delete stream ids ARGV[from .. from + count - 1], in chunks (Lua's stack is bounded).
_DELETE_IDS: Final = """
local function delete_ids(stream, from, count)
  local last = from + count - 1
  while from <= last do
    local upto = math.min(from + 999, last)
    redis.call('XDEL', stream, unpack(ARGV, from, upto))
    from = upto + 1
  end
end
"""

#: Whether the batch of this APPEND call is already stored: the journal's head is the batch's
#: newest cursor and the stream holds that entry with the same event. The newest entry of a
#: batch is always written (a window keeps its newest entry), and an event carries its run's
#: sequence number and time, so only this batch leaves that trace.
_LANDED: Final = """
local function landed(head, entries)
  if entries < 1 then
    return false
  end
  local newest = 8 + 4 * (entries - 1)
  if head .. '-0' ~= ARGV[newest] then
    return false
  end
  local found = redis.call('XRANGE', KEYS[2], ARGV[newest], ARGV[newest])
  if not found[1] then
    return false
  end
  local fields = found[1][2]
  for j = 1, #fields - 1, 2 do
    if fields[j] == 'e' then
      return fields[j + 1] == ARGV[newest + 3]
    end
  end
  return false
end
"""

#: One journal batch, refused once the run was closed (another node may have ended it) or when
#: the stored head is not the one the batch continues. Idempotent: the same call again, after
#: its batch landed (a reply lost with its connection), writes nothing and returns 0; otherwise
#: it returns the number of entries written (at least 1). KEYS: run hash, stream, audits hash,
#: audits order, meta.
#: ARGV: expected head, version, #entries, #deletes, overflow, #audits, #state fields, then
#: per entry (id, weight, keep, event JSON), the ids to delete, per audit (delegation id,
#: JSON), per state field (name, value).
APPEND: Final = (
    _MARK
    + _PUT_ORDERED
    + _DELETE_IDS
    + _LANDED
    + """
local entries, deletes, overflow = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local head = redis.call('HGET', KEYS[1], 'head') or '0'
if head ~= ARGV[1] and landed(head, entries) then
  return 0
end
if redis.call('HEXISTS', KEYS[1], 'outcome') == 1 then
  return redis.error_reply('CONFLICT the run has ended: its journal takes no more entries')
end
if head ~= ARGV[1] then
  return redis.error_reply('CONFLICT the journal head is ' .. head .. ', not ' .. ARGV[1])
end
mark()
local version = ARGV[2]
local audits, fields = tonumber(ARGV[6]), tonumber(ARGV[7])
local i = 8
for _ = 1, entries do
  redis.call('XADD', KEYS[2], ARGV[i], 'v', version, 'w', ARGV[i + 1], 'k', ARGV[i + 2],
    'e', ARGV[i + 3])
  i = i + 4
end
if deletes > 0 then
  delete_ids(KEYS[2], i, deletes)
  i = i + deletes
end
if overflow > 0 then
  local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', overflow)
  for _, entry in ipairs(oldest) do
    redis.call('XDEL', KEYS[2], entry[1])
  end
end
for _ = 1, audits do
  put_ordered(KEYS[3], KEYS[4], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, fields do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
return entries
"""
)

#: Results and the audit records they changed. KEYS: results hash, results order, audits
#: hash, audits order, meta. ARGV: #results, then per result (delegation id, JSON), then per audit
#: (delegation id, JSON).
RECORD_RESULTS: Final = (
    _MARK
    + _PUT_ORDERED
    + """
mark()
local results = tonumber(ARGV[1])
local i = 2
for _ = 1, results do
  put_ordered(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i < #ARGV do
  put_ordered(KEYS[3], KEYS[4], ARGV[i], ARGV[i + 1])
  i = i + 2
end
return results
"""
)

#: A new live run. KEYS: run hash, live runs, the node's live runs, runs opened, meta.
#: ARGV: run id, then the record's hash fields (name, value).
OPEN_RUN: Final = (
    _MARK
    + """
if redis.call('HEXISTS', KEYS[1], 'record') == 1 then
  return redis.error_reply('EXISTS run ' .. ARGV[1] .. ' is already archived')
end
mark()
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
local order = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], order, ARGV[1])
redis.call('ZADD', KEYS[3], order, ARGV[1])
return order
"""
)

#: Write the format marker unless there is one. KEYS: meta. ARGV: name, version.
#: Returns the marker as it stands.
CLAIM_NAMESPACE: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'version', ARGV[2])
end
return redis.call('HGETALL', KEYS[1])
"""

#: Queue a command, keeping the newest ARGV[2] of them. KEYS: the queue, meta.
#: ARGV: JSON, bound.
QUEUE_COMMAND: Final = (
    _MARK
    + """
mark()
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return 1
"""
)

#: Take or renew a node's lease. KEYS: the lease, meta. ARGV: how long it lasts (ms).
RENEW_LEASE: Final = (
    _MARK
    + """
mark()
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return 1
"""
)

#: Claim a lost node for ARGV[1] unless another node holds the claim. KEYS: the claim, meta.
#: ARGV: the claiming node, how long the claim lasts (ms). Returns 1 if taken, else 0.
CLAIM_NODE: Final = (
    _MARK
    + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  mark()
  return 1
end
return 0
"""
)
