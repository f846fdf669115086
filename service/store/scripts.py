"""Lua scripts: every multi-key change of a comparison is one atomic step (Redis 6.2 and 7).

Numbers never pass through Lua's cjson (it rounds to 14 digits): JSON documents are built in
Python and stored as opaque strings.
"""

from __future__ import annotations

# KEYS: meta, states, evidence, stream. ARGV: spec, evidence, group, then (model, state) pairs.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'version', 0, 'sequence', 0, 'next_seq', 0)
redis.call('SET', KEYS[3], ARGV[2])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[3], '0', 'MKSTREAM')
return 1
"""

# KEYS: meta, stream, idempotency key (may be unused).
# ARGV: digest, block, rows, ttl ms, work channel, comparison id, use idempotency ('1'/'0').
# Returns {status, sequence, rows}: accepted | duplicate | conflict | missing; for a duplicate or
# a conflict the sequence and rows of the chunk first recorded under the key ('' rows for a
# record written before rows were kept).
INGEST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0, ''} end
if ARGV[7] == '1' then
  local prior = redis.call('HMGET', KEYS[3], 'digest', 'sequence', 'rows')
  if prior[1] then
    local status = 'conflict'
    if prior[1] == ARGV[1] then status = 'duplicate' end
    return {status, tonumber(prior[2]), prior[3] or ''}
  end
end
local seq = redis.call('HINCRBY', KEYS[1], 'next_seq', 1)
redis.call('XADD', KEYS[2], '*', 'sequence', seq, 'rows', ARGV[3], 'block', ARGV[2])
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[3], 'digest', ARGV[1], 'sequence', seq, 'rows', ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {'accepted', seq, ARGV[3]}
"""

# The compare-and-set commit of a worker.
# KEYS: meta, states, evidence, trace, blocks, stream, dead letters, attempts.
# ARGV: 1 expected version, 2 sequence, 3 block, 4 group, 5 stream entry id ('' for a catch-up
# step that applies no new chunk), 6 evidence JSON, 7 trace JSON ('' for none), 8 updates
# channel, 9 number of models still catching up, 10 status reason ('' when ok), 11 '1' to halt
# on the entry instead of applying it, 12 dead-letter error ('' for no dead letter),
# 13 its failed attempts, 14 its action (halted|skipped), 15 the entry's original block,
# 16 time (s), then (model, state) pairs.
# A halting commit records the dead letter and leaves the entry pending and the sequence as it
# is; every other commit with an entry appends its block (empty for a skipped chunk) and acks it.
# Returns 1 applied, 0 stale (no-op), -1 comparison gone.
COMMIT = """
local meta = redis.call('HMGET', KEYS[1], 'version', 'sequence')
if not meta[1] then return -1 end
if tonumber(meta[1]) ~= tonumber(ARGV[1]) then return 0 end
if ARGV[5] ~= '' then
  local seq = tonumber(ARGV[2])
  if seq ~= tonumber(meta[2]) + 1 or redis.call('LLEN', KEYS[5]) ~= seq - 1 then return 0 end
  if ARGV[12] ~= '' then
    redis.call('XADD', KEYS[7], '*', 'sequence', seq, 'entry', ARGV[5], 'error', ARGV[12],
               'attempts', ARGV[13], 'action', ARGV[14], 'time', ARGV[16], 'block', ARGV[15])
  end
  redis.call('HDEL', KEYS[8], seq)
  if ARGV[11] == '1' then
    redis.call('HSET', KEYS[1], 'halted', seq)
  else
    redis.call('RPUSH', KEYS[5], ARGV[3])
    redis.call('HSET', KEYS[1], 'sequence', seq)
    redis.call('HDEL', KEYS[1], 'skip')
    redis.call('XACK', KEYS[6], ARGV[4], ARGV[5])
    redis.call('XDEL', KEYS[6], ARGV[5])
  end
end
if ARGV[7] ~= '' then redis.call('RPUSH', KEYS[4], ARGV[7]) end
for i = 17, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'catching_up', ARGV[9], 'status_reason', ARGV[10])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('SET', KEYS[3], ARGV[6])
redis.call('PUBLISH', ARGV[8], ARGV[6])
return 1
"""

# An operator resumes a halted comparison: retry the dead-lettered chunk, or skip it (the
# worker then commits it as an empty block).
# KEYS: meta, evidence, attempts. ARGV: expected version, halted sequence, action (retry|skip),
# evidence JSON, status reason ('' when ok), updates channel, work channel, comparison id.
# Returns 1 resumed, 0 stale version, -1 comparison gone, -2 not halted on that sequence.
RESUME = """
local meta = redis.call('HMGET', KEYS[1], 'version', 'halted')
if not meta[1] then return -1 end
if meta[2] ~= ARGV[2] then return -2 end
if tonumber(meta[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HDEL', KEYS[1], 'halted')
redis.call('HDEL', KEYS[3], ARGV[2])
if ARGV[3] == 'skip' then redis.call('HSET', KEYS[1], 'skip', ARGV[2]) end
redis.call('HSET', KEYS[1], 'status_reason', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('SET', KEYS[2], ARGV[4])
redis.call('PUBLISH', ARGV[6], ARGV[4])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""

# KEYS: meta, states, evidence. ARGV: expected version, spec, evidence, updates channel,
# model name, state, work channel, comparison id, 1 if the model must catch up else 0.
# Returns 1 added, 0 stale version, -1 comparison gone, -2 name taken.
ADD_MODEL = """
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return -1 end
if tonumber(version) ~= tonumber(ARGV[1]) then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[5]) == 1 then return -2 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'catching_up', ARGV[9])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[3])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""

# KEYS: lease. ARGV: token, ttl ms. Extends the lease only while the caller still holds it.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease. ARGV: token.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
