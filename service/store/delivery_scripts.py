"""Lua scripts of webhook deliveries (service/webhooks): the senders claim due deliveries and
settle them; the API replays dead ones and makes or rotates the comparison's secret. The
outbox, dead deliveries and secret are keys of the comparison (its slot); the senders' hint
(``keys.webhooks_due_key``) is a global key, written by a command of its own."""

from __future__ import annotations

from modelcompare.service.store.scripts import BURY, with_receipt

# The comparison's webhook secret, made from the candidate when it has none (in the meta hash,
# so that it goes with the comparison). KEYS: meta. ARGV: candidate. Returns the secret, or
# false when the comparison is gone.
SECRET = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSETNX', KEYS[1], 'webhook_secret', ARGV[1])
return redis.call('HGET', KEYS[1], 'webhook_secret')
"""

# A new secret. KEYS: meta, receipt. ARGV: the secret, receipt ttl ms. Returns 1, or -1 gone.
ROTATE_SECRET = with_receipt("""
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'webhook_secret', ARGV[1])
return 1
""")

# A sender takes the deliveries due: each is due again only after the lease (a sender that
# dies mid-request leaves it to another), and read with the secret to sign it with.
# KEYS: outbox, outbox due, meta. ARGV: now ms, lease ms, most deliveries, candidate secret.
# Returns {secret ('' when none were due or the comparison is gone), the next due time ms
# ('' when none waits), id, record, id, record, ...}.
CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local out = {'', ''}
if #due > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSETNX', KEYS[3], 'webhook_secret', ARGV[4])
  out[1] = redis.call('HGET', KEYS[3], 'webhook_secret')
  for _, id in ipairs(due) do
    local record = redis.call('HGET', KEYS[1], id)
    if record then
      redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
      table.insert(out, id)
      table.insert(out, record)
    else
      redis.call('ZREM', KEYS[2], id)
    end
  end
end
local next = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if next[2] then out[2] = next[2] end
return out
"""

# How a try went. KEYS: outbox, outbox due, dead deliveries, their order, meta. ARGV: id,
# outcome (delivered|retry|dead), the record after the try, when it is due again (ms), dead
# deliveries kept, now (ms). A delivery no longer waiting (another sender delivered it after
# this one's lease ran out) is left as it is. Returns the next due time ms ('' when none waits).
SETTLE = BURY + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if ARGV[2] == 'retry' then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  else
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('ZREM', KEYS[2], ARGV[1])
    if ARGV[2] == 'dead' then
      bury(KEYS[3], KEYS[4], ARGV[1], ARGV[3], ARGV[6], ARGV[5])
    elseif redis.call('EXISTS', KEYS[5]) == 1 then
      redis.call('HINCRBY', KEYS[5], 'deliveries', 1)
    end
  end
end
local next = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return next[2] or ''
"""

# The senders' hint after a claim: the comparison's next due time, or out of the hint when
# nothing waits; only if its score is still the one the sender read (a commit that wrote a new
# one since wins). KEYS: the hint. ARGV: comparison id, the score read, next due ms or ''.
REHINT = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1])
else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
"""

# A dead delivery waits again, its tries counted from zero. KEYS: dead deliveries, their
# order, outbox, outbox due, receipt. ARGV: id, the record, now ms, deliveries waiting at
# most, receipt ttl ms. Returns 1 replayed, 0 no such dead delivery, -2 the outbox is full.
REPLAY = with_receipt("""
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HLEN', KEYS[3]) >= tonumber(ARGV[4]) then return -2 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
return 1
""")
