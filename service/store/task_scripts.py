"""Lua scripts of the model updates of one chunk shared out among workers (service/parallel.py,
service/store/tasks.py); the rules of service/store/scripts.py hold: every KEY is a key of one
comparison."""

from __future__ import annotations

# Model updates of one chunk shared out among workers (service/parallel.py). The task hash
# belongs to one sequence and one list of models; results staged for it stay valid until the
# commit of that chunk deletes it, because each model's update is a function of the committed
# states before the chunk and of (seed, model, sequence).
# KEYS: tasks, tasks done, meta. ARGV: sequence, block, models ('\n'-joined),
# work channel, comparison id. Opens the tasks (keeping results already staged for the same
# chunk) and wakes workers; 0 when the comparison is gone (nothing is written once its meta
# is deleted).
OPEN_TASKS = """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local open = redis.call('HMGET', KEYS[1], 'sequence', 'models')
if open[1] ~= ARGV[1] or open[2] ~= ARGV[3] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('HSET', KEYS[1], 'sequence', ARGV[1], 'block', ARGV[2], 'models', ARGV[3])
end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""

# KEYS: tasks. ARGV: sequence, consumer, claim ttl ms, then models to pass over (those the
# caller computed and keeps). The first other model of the chunk with no staged result and no
# live claim of another worker (re-entrant, like a lease: after a Redis restart the claimant
# takes its own claims back), now claimed by the caller; false when there is none.
CLAIM_TASK = """
local open = redis.call('HMGET', KEYS[1], 'sequence', 'models')
if open[1] ~= ARGV[1] then return false end
local kept = {}
for i = 4, #ARGV do kept[ARGV[i]] = true end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for name in string.gmatch(open[2], '[^\\n]+') do
  local claim = redis.call('HGET', KEYS[1], 'claim:' .. name)
  local free = not claim or tonumber(string.match(claim, '|(%d+)$')) < now
    or string.sub(claim, 1, #ARGV[2] + 1) == ARGV[2] .. '|'
  if free and not kept[name] and redis.call('HEXISTS', KEYS[1], 'summary:' .. name) == 0
      and redis.call('HEXISTS', KEYS[1], 'error:' .. name) == 0 then
    redis.call('HSET', KEYS[1], 'claim:' .. name, ARGV[2] .. '|' .. (now + tonumber(ARGV[3])))
    return name
  end
end
return false
"""

# KEYS: tasks. ARGV: sequence, model, consumer, claim ttl ms. Extends the caller's claim.
RENEW_TASK = """
if redis.call('HGET', KEYS[1], 'sequence') ~= ARGV[1] then return 0 end
local claim = redis.call('HGET', KEYS[1], 'claim:' .. ARGV[2])
if not claim or string.sub(claim, 1, #ARGV[3] + 1) ~= ARGV[3] .. '|' then return 0 end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('HSET', KEYS[1], 'claim:' .. ARGV[2], ARGV[3] .. '|' .. (now + tonumber(ARGV[4])))
return 1
"""

# KEYS: tasks, tasks done, meta. ARGV: sequence, model, state, summary JSON, error ('' for
# none), over budget ('1' when that error is the compute budget running out, else '0'). Stages
# one model's result for the chunk (a no-op once the chunk is committed or reopened, or the
# comparison deleted).
STAGE_TASK = """
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'sequence') ~= ARGV[1] then return 0 end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'error:' .. ARGV[2], ARGV[5], 'over_budget:' .. ARGV[2], ARGV[6])
else
  redis.call('HSET', KEYS[1], 'state:' .. ARGV[2], ARGV[3], 'summary:' .. ARGV[2], ARGV[4])
end
redis.call('HDEL', KEYS[1], 'claim:' .. ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""
