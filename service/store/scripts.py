"""Lua scripts: every multi-key change of a comparison is one atomic step (Redis 6.2 and 7).

Numbers never pass through Lua's cjson (it rounds to 14 digits): JSON documents are built in
Python and stored as opaque strings.

Redis Cluster: every script's KEYS are keys of one comparison (one ``{cmp:<id>}`` hash tag, one
slot), and so is the updates channel it publishes on (``SPUBLISH`` in a cluster). The work
channel is a plain ``PUBLISH``, which a cluster delivers on every node: workers on any node wake.
No script touches the comparison index.
"""

from __future__ import annotations


def with_receipt(body: str) -> str:
    """``body`` made safe to re-send after a lost reply (docs/design/exactly-once.md): its last
    KEY is the receipt of the request's identity, its last ARGV the receipt's time to live in
    ms. A run that takes effect (``body`` returns 1) writes the receipt in the same atomic step;
    a run that finds it answers 1 and changes nothing. Any other answer (stale, gone, taken)
    wrote nothing, so it leaves no receipt and the request may run again under its identity."""
    return (
        "if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return 1 end\n"
        f"local result = (function()\n{body}end)()\n"
        "if result == 1 then redis.call('SET', KEYS[#KEYS], '1', 'PX', ARGV[#ARGV]) end\n"
        "return result\n"
    )

# KEYS: meta, states, evidence, stream, progress. ARGV: spec, evidence, group, progress, then
# (model, state) pairs.
# ``models`` counts the models ever in the spec (created, then added; a removal leaves it):
# ingest compares it with the spec it validated against, which no add-then-remove can fool.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'version', 0, 'sequence', 0, 'next_seq', 0,
           'models', (#ARGV - 4) / 2)
redis.call('SET', KEYS[3], ARGV[2])
redis.call('SET', KEYS[5], ARGV[4])
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[3], '0', 'MKSTREAM')
return 1
"""

# KEYS: meta, stream, the record of the request: the client's idempotency key, else the receipt
# of the identity the API gave the request.
# ARGV: digest (hex), block, rows, the record's ttl ms, work channel, comparison id, the number
# of models the chunk was validated against, digest (raw bytes), the most bytes of chunk blocks
# the comparison may hold (meta field 'bytes' counts those accepted). The number of models is
# ``Meta.models_added`` of the meta the chunk was validated against.
# A record is one string, "sequence:rows:<raw digest>" (a hash with the hex digest before;
# those are still read until they expire).
# Returns {status, sequence, rows}: accepted | duplicate | conflict | missing | stale (a model
# was added since the chunk was validated: validate it again) | full (the block would take the
# comparison past its bytes: {'full', bytes held, ''}); for a duplicate or a conflict the
# sequence and rows of the chunk first recorded under the key ('' rows for a record written
# before rows were kept).
INGEST = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0, ''} end
local kind = redis.call('TYPE', KEYS[3])['ok']
local digest, sequence, rows
if kind == 'string' then
  sequence, rows, digest = string.match(redis.call('GET', KEYS[3]), '^(%d+):(%d+):(.*)$')
elseif kind == 'hash' then
  local prior = redis.call('HMGET', KEYS[3], 'digest', 'sequence', 'rows')
  digest, sequence, rows = prior[1], prior[2], prior[3]
end
if digest then
  local status = 'conflict'
  if digest == ARGV[1] or digest == ARGV[8] then status = 'duplicate' end
  return {status, tonumber(sequence), rows or ''}
end
local models = redis.call('HGET', KEYS[1], 'models')
if models and tonumber(models) ~= tonumber(ARGV[7]) then return {'stale', 0, ''} end
local held = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
if held + #ARGV[2] > tonumber(ARGV[9]) then return {'full', held, ''} end
redis.call('HINCRBY', KEYS[1], 'bytes', #ARGV[2])
local seq = redis.call('HINCRBY', KEYS[1], 'next_seq', 1)
redis.call('XADD', KEYS[2], '*', 'sequence', seq, 'rows', ARGV[3], 'block', ARGV[2])
redis.call('SET', KEYS[3], seq .. ':' .. ARGV[3] .. ':' .. ARGV[8], 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {'accepted', seq, ARGV[3]}
"""

# A webhook delivery given up on (service/webhooks): kept among the dead deliveries, of which
# only the newest ``kept`` stay. Used by COMMIT (the outbox is full) and by the senders' SETTLE.
BURY = """
local function bury(dead, order, id, record, time, kept)
  redis.call('HSET', dead, id, record)
  redis.call('ZADD', order, time, id)
  local over = redis.call('ZCARD', order) - tonumber(kept)
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', order, over)
    for i = 1, #oldest, 2 do redis.call('HDEL', dead, oldest[i]) end
  end
end
"""

# The compare-and-set commit of a worker.
# KEYS: meta, states, evidence, trace, blocks, stream, dead letters, attempts, tasks, tasks
# done (the model updates of the chunk, shared out: deleted with the chunk's commit), waiting
# (a worker that could not serve the comparison said why: one that can just did, so it goes),
# progress, events (hash: id -> JSON), event order (sorted set: ids by sequence), the webhook
# outbox (hash), its due times (sorted set), dead deliveries (hash), their order (sorted set).
# ARGV: 1 expected version, 2 sequence, 3 block, 4 group, 5 stream entry id ('' for a catch-up
# step that applies no new chunk), 6 evidence JSON, 7 trace JSON ('' for none), 8 updates
# channel, 9 number of models still catching up, 10 status reason ('' when ok), 11 '1' to halt
# on the entry instead of applying it, 12 dead-letter error ('' for no dead letter),
# 13 its failed attempts, 14 its action (halted|skipped), 15 the entry's original block,
# 16 time (s), 17 the publish command (PUBLISH, or SPUBLISH in a cluster), 18 the progress
# record (JSON), 19 events kept, 20 deliveries waiting at most, 21 dead deliveries kept,
# 22 time (ms), 23 E: the number of event values that follow, (id, sequence, JSON, webhook
# delivery JSON or '', the same delivery given up on) per event (service/events.py,
# service/webhooks/deliveries.py), then (model, state) pairs.
# An event id is stored once (meta field 'events' counts them), whatever commit carries it,
# and so is its delivery: due at once, or dead when the outbox is full; past the events kept
# the oldest go.
# A halting commit records the dead letter and leaves the entry pending and the sequence as it
# is; every other commit with an entry appends its block (empty for a skipped chunk) and acks it.
# Returns 1 applied, 0 stale (no-op), -1 comparison gone.
COMMIT = BURY + """
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
  redis.call('DEL', KEYS[9], KEYS[10])
end
if ARGV[7] ~= '' then redis.call('RPUSH', KEYS[4], ARGV[7]) end
local events = tonumber(ARGV[23])
for i = 24, 23 + events, 5 do
  if redis.call('HSETNX', KEYS[13], ARGV[i], ARGV[i + 2]) == 1 then
    redis.call('ZADD', KEYS[14], ARGV[i + 1], ARGV[i])
    redis.call('HINCRBY', KEYS[1], 'events', 1)
    if ARGV[i + 3] ~= '' then
      if redis.call('HLEN', KEYS[15]) < tonumber(ARGV[20]) then
        redis.call('HSET', KEYS[15], ARGV[i], ARGV[i + 3])
        redis.call('ZADD', KEYS[16], ARGV[22], ARGV[i])
      else
        bury(KEYS[17], KEYS[18], ARGV[i], ARGV[i + 4], ARGV[22], ARGV[21])
      end
    end
  end
end
local over = redis.call('ZCARD', KEYS[14]) - tonumber(ARGV[19])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[14], over)
  for i = 1, #oldest, 2 do redis.call('HDEL', KEYS[13], oldest[i]) end
end
for i = 24 + events, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'catching_up', ARGV[9], 'status_reason', ARGV[10])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('SET', KEYS[3], ARGV[6])
redis.call('SET', KEYS[12], ARGV[18])
redis.call('DEL', KEYS[11])
redis.call(ARGV[17], ARGV[8], ARGV[6])
return 1
"""

# A worker acknowledges (and deletes) a chunk the comparison has applied already: a redelivery.
# KEYS: meta, stream. ARGV: group, stream entry id, the entry's sequence.
# Only where the stored sequence has reached the entry's: a worker's snapshot can be ahead of the
# store (a Redis failover that lost the last commits: replication is asynchronous), and a chunk
# it takes for applied may not be. Returns 1 acknowledged, 0 not applied yet, -1 comparison gone.
ACK_APPLIED = """
local sequence = redis.call('HGET', KEYS[1], 'sequence')
if not sequence then return -1 end
if tonumber(sequence) < tonumber(ARGV[3]) then return 0 end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
return 1
"""

# A failed update of a chunk is counted (service/poison.py) only while the comparison exists: a
# worker whose chunk failed because the comparison was deleted under it (its rows gone) would
# otherwise leave the count behind the delete's sweep, for good.
# KEYS: meta, attempts. ARGV: the chunk's sequence. Returns its failures so far, -1 when gone.
RECORD_FAILURE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
"""

# A worker that cannot build a model of the comparison (service/unavailable.py) says why.
# KEYS: meta, waiting. ARGV: the version the worker read, the record (JSON), its ttl ms.
# Nothing is written once the comparison changed since (another worker committed, a model was
# added or removed: the reason may no longer hold) or is gone. Returns 1 recorded, else 0.
LEAVE_ALONE = """
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""

# An operator resumes a halted comparison: retry the dead-lettered chunk, or skip it (the
# worker then commits it as an empty block).
# KEYS: meta, evidence, attempts, progress, receipt. ARGV: expected version, halted sequence,
# action (retry|skip), evidence JSON, status reason ('' when ok), updates channel, work channel,
# comparison id, the publish command of the updates channel, progress JSON, receipt ttl ms.
# Returns 1 resumed, 0 stale version, -1 comparison gone, -2 not halted on that sequence.
RESUME = with_receipt("""
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
redis.call('SET', KEYS[4], ARGV[10])
redis.call(ARGV[9], ARGV[6], ARGV[4])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
""")

# KEYS: meta, states, evidence, progress, receipt. ARGV: expected version, spec, evidence,
# updates channel, model name, state, work channel, comparison id, 1 if the model must catch up
# else 0, chunks ingested when the caller checked them against the model (next_seq), the
# publish command of the updates channel, progress JSON, receipt ttl ms.
# Returns 1 added, 0 stale (version, or chunks ingested since the check), -1 comparison gone,
# -2 name taken.
ADD_MODEL = with_receipt("""
local meta = redis.call('HMGET', KEYS[1], 'version', 'next_seq')
if not meta[1] then return -1 end
if tonumber(meta[1]) ~= tonumber(ARGV[1]) or tonumber(meta[2]) ~= tonumber(ARGV[10]) then
  return 0
end
if redis.call('HEXISTS', KEYS[2], ARGV[5]) == 1 then return -2 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'models') == 1 then
  redis.call('HINCRBY', KEYS[1], 'models', 1)
end
redis.call('HINCRBY', KEYS[1], 'catching_up', ARGV[9])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[12])
redis.call(ARGV[11], ARGV[4], ARGV[3])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
""")

# KEYS: meta, states, evidence, progress, receipt. ARGV: expected version, spec (without the
# model), evidence, updates channel, model name, 1 if the model was catching up else 0, the
# publish command of the updates channel, progress JSON, receipt ttl ms. The other models'
# states stay as they are: each model's update depends only on its own state and (seed, model,
# sequence). 'models' (models ever added) stays: a chunk validated against more models than
# remain is valid for the rest.
# Returns 1 removed, 0 stale version, -1 comparison gone, -2 no such model.
REMOVE_MODEL = with_receipt("""
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return -1 end
if tonumber(version) ~= tonumber(ARGV[1]) then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[5]) == 0 then return -2 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2])
local catching_up = tonumber(redis.call('HGET', KEYS[1], 'catching_up') or '0')
redis.call('HSET', KEYS[1], 'catching_up', math.max(0, catching_up - tonumber(ARGV[6])))
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HDEL', KEYS[2], ARGV[5])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[8])
redis.call(ARGV[7], ARGV[4], ARGV[3])
return 1
""")

# Deleting starts with the meta: once it is gone nothing else writes to the comparison (every
# script checks it first); the caller then removes the rest, which a re-run repeats harmlessly.
# KEYS: meta, receipt. ARGV: receipt ttl ms. Returns 1 deleted, 0 no such comparison.
DELETE = with_receipt("""
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
return 1
""")

# KEYS: lease, meta. ARGV: token, ttl ms. Takes the lease when it is free or already the
# caller's (re-entrant: a lease that survived a Redis restart in the AOF goes straight back to
# its holder, which need not wait for it to expire); sets its time to live. Never for a deleted
# comparison: a lease taken after the delete's sweep of its keys would be left behind.
ACQUIRE = """
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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

# Forget consumers that are gone: idle past a bound and owning no pending entry. In one script,
# so a consumer cannot read an entry between the check and its removal (which would drop the
# entry from the pending list for good). KEYS: stream. ARGV: group, idle bound ms, own name.
# Returns the names removed.
PRUNE_CONSUMERS = """
local removed = {}
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #consumer, 2 do info[consumer[i]] = consumer[i + 1] end
  if info['pending'] == 0 and info['idle'] > tonumber(ARGV[2]) and info['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    table.insert(removed, info['name'])
  end
end
return removed
"""
