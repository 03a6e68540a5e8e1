package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts. Each operation is one script, so one round trip and atomic.
// Every script reads each key it may write before its first write: a key
// holding another type then fails the script (WRONGTYPE) before anything
// was changed, because Redis does not roll back a script's earlier writes.
//
// Times are the server's: TIME for the queue's deadlines and the token
// floor, PX/PTTL for the holder.

// acquireScript makes one attempt.
//
//	KEYS: holder, fence, queue, timeouts
//	ARGV: owner, ttl ms, request id, mode ("t" try, "w" wait, "f" fair wait), waiter timeout ms, channel
//
// Replies {1, token, count} when granted, or {0, holder owner or "",
// holder token or "", wait hint ms, queue length} when not.
//
// A holder whose owner is the caller's re-enters (count+1) unless the
// request id is the one that made the hold, which means the reply to this
// very request was lost and the client retried it: then the hold is
// returned unchanged. A new grant takes token max(last+1, server time in
// µs) and records it in the fence key, which never expires: tokens thus
// keep increasing even across a loss of the fence key (restart without
// persistence, failover to a replica that missed the last grants), as long
// as the servers' clocks agree to better than the time between the lost
// grant and the next one.
//
// Fair waiters ("f") are queued (or, if already queued, have their
// deadline refreshed); waiters whose deadline passed are dropped first. A
// free lock with a queue goes to the queue's head only.
var acquireScript = goredis.NewScript(`
local h, f, q, qt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, ttl, rid, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local cur = redis.call('HMGET', h, 'o', 'n', 't', 'r')
if cur[1] == owner then
  local n = tonumber(cur[2])
  if cur[4] ~= rid then
    n = redis.call('HINCRBY', h, 'n', 1)
    redis.call('HSET', h, 'r', rid)
    if redis.call('PTTL', h) < ttl then redis.call('PEXPIRE', h, ttl) end
  end
  return {1, cur[3], n}
end
if not cur[1] and redis.call('EXISTS', h) == 1 then
  return redis.error_reply('DLOCKFOREIGN ' .. h)
end
local last = redis.call('GET', f)
if last and not tonumber(last) then
  return redis.error_reply('DLOCKFOREIGN ' .. f)
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local qlen = redis.call('LLEN', q)
local head, old = false, false
if qlen > 0 or mode == 'f' then
  if qlen > 0 then old = redis.call('LINDEX', q, 0) end
  local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(dead) do
    redis.call('LREM', q, 1, id)
    redis.call('ZREM', qt, id)
  end
  if #dead > 0 then qlen = redis.call('LLEN', q) end
  if qlen > 0 then head = redis.call('LINDEX', q, 0) end
end
local function enqueue()
  if not redis.call('ZSCORE', qt, rid) then
    redis.call('RPUSH', q, rid)
    qlen = qlen + 1
  end
  redis.call('ZADD', qt, now + tonumber(ARGV[5]), rid)
  local latest = redis.call('ZRANGE', qt, -1, -1, 'WITHSCORES')
  local exp = tonumber(latest[2]) + 1000
  redis.call('PEXPIREAT', q, exp)
  redis.call('PEXPIREAT', qt, exp)
end
if cur[1] then
  if mode == 'f' then enqueue() end
  return {0, cur[1], cur[3] or '', redis.call('PTTL', h), qlen}
end
if head and head ~= rid then
  if mode == 'f' then enqueue() end
  if head ~= old then redis.call('PUBLISH', ARGV[6], head) end
  local hd = tonumber(redis.call('ZSCORE', qt, head) or now)
  return {0, '', '', math.max(hd - now, 0), qlen}
end
if head then
  redis.call('LPOP', q)
  redis.call('ZREM', qt, rid)
end
local tok = string.format('%.0f', math.max((tonumber(last) or 0) + 1, t[1] * 1000000 + t[2]))
redis.call('SET', f, tok)
redis.call('HSET', h, 'o', owner, 'n', 1, 't', tok, 'r', rid)
redis.call('PEXPIRE', h, ttl)
return {1, tok, 1}
`)

// renewScript extends a hold.
//
//	KEYS: holder
//	ARGV: owner, token, ttl ms
//
// Replies {1}, or {0, holder owner or "", holder token or ""}.
var renewScript = goredis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'o', 't')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
return {0, cur[1] or '', cur[2] or ''}
`)

// renewBatchScript extends many holds (all in one slot on a Cluster).
//
//	KEYS: holder 1..n
//	ARGV: owner, token, ttl ms for each key in turn
//
// Replies one integer per key: 1 renewed, 0 not held by that owner and
// token, -1 the key holds another type.
var renewBatchScript = goredis.NewScript(`
local res = {}
for i, k in ipairs(KEYS) do
  local j = (i - 1) * 3
  local cur = redis.pcall('HMGET', k, 'o', 't')
  if cur.err then
    res[i] = -1
  elseif cur[1] == ARGV[j + 1] and cur[2] == ARGV[j + 2] then
    redis.call('PEXPIRE', k, ARGV[j + 3])
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
`)

// releaseScript gives up one hold and, when the lock frees, publishes the
// queue's head (after dropping dead waiters) or "" on the lock's channel.
//
//	KEYS: holder, queue, timeouts
//	ARGV: owner, token, channel
//
// Replies {1, count left}, or {0, holder owner or "", holder token or ""}.
var releaseScript = goredis.NewScript(`
local h, q, qt = KEYS[1], KEYS[2], KEYS[3]
local cur = redis.call('HMGET', h, 'o', 'n', 't')
if cur[1] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return {0, cur[1] or '', cur[3] or ''}
end
local n = tonumber(cur[2]) - 1
if n > 0 then
  redis.call('HSET', h, 'n', n)
  return {1, n}
end
local head = ''
if redis.call('LLEN', q) > 0 then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(dead) do
    redis.call('LREM', q, 1, id)
    redis.call('ZREM', qt, id)
  end
  head = redis.call('LINDEX', q, 0) or ''
end
redis.call('DEL', h)
redis.call('PUBLISH', ARGV[3], head)
return {1, 0}
`)

// cancelScript withdraws a waiter: it leaves the queue and, if an attempt
// of this request was granted without the client learning it (the reply
// was lost, or the call was cancelled while in flight), that grant is given
// back. If the lock is free and the queue's head changed, the new head (or
// "") is published.
//
//	KEYS: holder, queue, timeouts
//	ARGV: request id, owner, channel
//
// Replies 1 if a grant was given back, else 0.
var cancelScript = goredis.NewScript(`
local h, q, qt = KEYS[1], KEYS[2], KEYS[3]
local rid = ARGV[1]
local cur = redis.call('HMGET', h, 'o', 'n', 'r')
local wasHead = redis.call('LINDEX', q, 0) == rid
redis.call('ZSCORE', qt, rid)
local undone, freed = 0, false
if cur[1] == ARGV[2] and cur[3] == rid then
  undone = 1
  local n = tonumber(cur[2]) - 1
  if n > 0 then
    redis.call('HSET', h, 'n', n, 'r', '')
  else
    redis.call('DEL', h)
    freed = true
  end
end
redis.call('LREM', q, 0, rid)
redis.call('ZREM', qt, rid)
if freed or (wasHead and redis.call('EXISTS', h) == 0) then
  local head = ''
  if redis.call('LLEN', q) > 0 then
    local t = redis.call('TIME')
    local now = t[1] * 1000 + math.floor(t[2] / 1000)
    local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
    for _, id in ipairs(dead) do
      redis.call('LREM', q, 1, id)
      redis.call('ZREM', qt, id)
    end
    head = redis.call('LINDEX', q, 0) or ''
  end
  redis.call('PUBLISH', ARGV[3], head)
end
return undone
`)
