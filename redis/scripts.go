package redis

import (
	"crypto/sha1"
	"encoding/hex"
)

// script is a Lua script and its SHA1, for EVALSHA.
type script struct {
	name, src, hash string
	// srcArg and hashArg are src and hash as command arguments.
	srcArg, hashArg any
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	s := &script{name: name, src: src, hash: hex.EncodeToString(sum[:])}
	s.srcArg, s.hashArg = s.src, s.hash
	return s
}

// The scripts. Each operation is one script, so one round trip and atomic.
//
// A lock is one hash, PREFIX:{NAME}, that is never deleted:
//
//	o  holder's owner (absent when free)
//	n  reentry count
//	r  id of the request that made or last re-entered the hold
//	x  end of the lease, server time in ms (TIME)
//	f  last token granted (the fence), which is also the holder's token;
//	   kept when the lock frees
//	w  length of the fair queue when last seen (0 or absent: no queue)
//	s  server time (ms) until which a waiter that is not in the fair queue
//	   may be waiting for a release notice (see below)
//
// Expiry is judged in the scripts against the server's clock (TIME), the
// same clock Redis uses for PX. Fair locks also use a list (the queue, in
// arrival order) and a sorted set (each queued waiter's deadline), which
// expire a second after the last waiter's deadline.
//
// Every script reads each key it may write before its first write, so that
// a key holding another type fails the script (WRONGTYPE) before anything
// was changed: Redis does not roll back a script's earlier writes.
//
// A release publishes on the lock's channel (PREFIX:{NAME}:wake) only when
// someone may be waiting: a fair queue with a live head, or an unexpired
// s. Each failed attempt of a waiting Lock (mode "w") moves s to at least
// the end of that waiter's next Wait (the hint it is given plus the waiter
// timeout as slack), and a waiter always makes a new attempt when its Wait
// ends, so a release that skips PUBLISH has no live waiter to wake: an
// uncontended lock costs no PUBLISH (which on a Cluster goes to every
// node). A release whose queue head is a waiter of the releasing process
// (its request id starts with the process's tag, ARGV) does not publish
// either: the process wakes that waiter itself.
//
// New tokens are max(f+1, server time in µs), so that tokens keep
// increasing even if the hash is lost (a restart without persistence, a
// failover to a replica that missed the last grants), provided the servers'
// clocks agree to better than the time between the lost grant and the next.

// acquireScript makes one attempt.
//
//	KEYS: lock hash, queue, timeouts
//	ARGV: owner, ttl ms, request id, mode ("t" try, "w" wait, "f" fair wait), waiter timeout ms
//
// Replies the token (an integer) for a new grant of a lock that was free
// and had no fair queue: the common case, which takes one HMGET, TIME and
// one HSET. Otherwise {1, token, count} when granted, or {0, holder owner
// or "", holder token or "", wait hint ms, queue length} when not.
//
// A holder whose owner is the caller's re-enters (count+1) unless the
// request id is the one that made the hold: then the reply to this very
// request was lost and the client retried it, and the hold is returned
// unchanged. Fair waiters ("f") are queued (if already queued, their
// deadline is refreshed); waiters whose deadline passed are dropped first.
// A free lock with a queue goes to the queue's head only, and when dropping
// dead waiters makes another waiter the head of a free lock's queue, that
// waiter is told.
var acquireScript = newScript("acquire", `
local h, q, qt = KEYS[1], KEYS[2], KEYS[3]
local owner, rid, mode = ARGV[1], ARGV[3], ARGV[4]
local cur = redis.call('HMGET', h, 'o', 'n', 'f', 'r', 'x', 'w', 's')
local f = tonumber(cur[3])
if not f then
  if cur[3] or redis.call('EXISTS', h) == 1 then
    return redis.error_reply('DLOCKFOREIGN ' .. h)
  end
  f = 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local exp = now + tonumber(ARGV[2])
local x = tonumber(cur[5]) or 0
local held = cur[1] and x > now
local w = tonumber(cur[6]) or 0
if not held and w == 0 then
  -- Free, no fair queue: a new grant. The token goes to HSET and into the
  -- reply as a number (exact below 2^53; Redis writes it as an integer).
  local tok = math.max(f + 1, t[1] * 1000000 + t[2])
  redis.call('HSET', h, 'o', owner, 'n', '1', 'r', rid, 'x', exp, 'f', tok)
  return tok
end
if held and cur[1] == owner then
  local n = tonumber(cur[2])
  if cur[4] ~= rid then
    n = n + 1
    redis.call('HSET', h, 'n', n, 'r', rid, 'x', math.max(x, exp))
  end
  return {1, cur[3], n}
end
local qlen, head, old = 0, false, false
if w > 0 or mode == 'f' and held then
  qlen = redis.call('LLEN', q)
  if qlen > 0 then
    old = redis.call('LINDEX', q, 0)
    local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
    for _, id in ipairs(dead) do
      redis.call('LREM', q, 1, id)
      redis.call('ZREM', qt, id)
    end
    if #dead > 0 then qlen = redis.call('LLEN', q) end
    if qlen > 0 then head = redis.call('LINDEX', q, 0) end
  end
end
if held or head and head ~= rid then
  local wait = x - now
  if not held then wait = math.max(tonumber(redis.call('ZSCORE', qt, head) or now) - now, 0) end
  if mode == 'f' then
    if not redis.call('ZSCORE', qt, rid) then
      redis.call('RPUSH', q, rid)
      qlen = qlen + 1
    end
    redis.call('ZADD', qt, now + tonumber(ARGV[5]), rid)
    local last = redis.call('ZRANGE', qt, -1, -1, 'WITHSCORES')
    local gone = tonumber(last[2]) + 1000
    redis.call('PEXPIREAT', q, gone)
    redis.call('PEXPIREAT', qt, gone)
  end
  local sv = tonumber(cur[7]) or 0
  local until_ = now + wait + tonumber(ARGV[5])
  if mode == 'w' and sv < until_ - tonumber(ARGV[5]) / 2 then
    if qlen ~= w then
      redis.call('HSET', h, 's', until_, 'w', qlen)
    else
      redis.call('HSET', h, 's', until_)
    end
  elseif qlen ~= w then
    redis.call('HSET', h, 'w', qlen)
  end
  if not held and head ~= old then redis.call('PUBLISH', h .. ':wake', head) end
  if held then return {0, cur[1], cur[3] or '', wait, qlen} end
  return {0, '', '', wait, qlen}
end
if head then
  redis.call('LPOP', q)
  redis.call('ZREM', qt, rid)
  qlen = qlen - 1
end
local tok = string.format('%.0f', math.max(f + 1, t[1] * 1000000 + t[2]))
if qlen ~= w then
  redis.call('HSET', h, 'o', owner, 'n', 1, 'r', rid, 'x', exp, 'f', tok, 'w', qlen)
else
  redis.call('HSET', h, 'o', owner, 'n', 1, 'r', rid, 'x', exp, 'f', tok)
end
return {1, tok, 1}
`)

// renewScript extends a hold.
//
//	KEYS: lock hash
//	ARGV: owner, token, ttl ms
//
// Replies {1}, or {0, holder owner or "", holder token or ""}.
var renewScript = newScript("renew", `
local cur = redis.call('HMGET', KEYS[1], 'o', 'f', 'x')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if (tonumber(cur[3]) or 0) <= now then
  return {0, '', ''}
end
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'x', now + tonumber(ARGV[3]))
  return {1}
end
return {0, cur[1] or '', cur[2] or ''}
`)

// renewBatchScript extends many holds (all in one slot on a Cluster).
//
//	KEYS: lock hash 1..n
//	ARGV: owner, token, ttl ms for each key in turn
//
// Replies one integer per key: 1 renewed, 0 not held by that owner and
// token, -1 the key holds another type.
var renewBatchScript = newScript("renewBatch", `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local res = {}
for i, k in ipairs(KEYS) do
  local j = (i - 1) * 3
  local cur = redis.pcall('HMGET', k, 'o', 'f', 'x')
  if cur.err then
    res[i] = -1
  elseif cur[1] == ARGV[j + 1] and cur[2] == ARGV[j + 2] and (tonumber(cur[3]) or 0) > now then
    redis.call('HSET', k, 'x', now + tonumber(ARGV[j + 3]))
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
`)

// releaseScript gives up one hold. When the lock frees it drops dead fair
// waiters and publishes the queue's head on the lock's channel, unless the
// head is a waiter of the releasing process; without a queue it publishes
// "" if a waiter may be waiting (s).
//
// The releasing process may name one of its own fair waiters of the lock
// (request id, owner, ttl ms). If that waiter is the queue's head, the lock
// is handed to it at once: it leaves the queue and gets a new grant, made
// by its request id, whose token is in the reply; the releasing process
// passes the grant on. (If the waiter attempts anyway, the acquire script
// returns this grant; if it gives up, the cancel script gives it back.)
//
//	KEYS: lock hash, queue, timeouts
//	ARGV: owner, token, the releasing process's request id tag,
//	      [waiter's request id, owner, ttl ms]
//
// Replies 1 when the lock freed with no fair queue and no waiter to tell
// (the common case: one HMGET, TIME and one HDEL), else {1, count left,
// queue head or "", handed-off token or ""}, or {0, holder owner or "",
// holder token or ""}.
var releaseScript = newScript("release", `
local h, q, qt = KEYS[1], KEYS[2], KEYS[3]
local cur = redis.call('HMGET', h, 'o', 'n', 'f', 'x', 'w', 's')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if (tonumber(cur[4]) or 0) <= now then
  return {0, '', ''}
end
if cur[1] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return {0, cur[1] or '', cur[3] or ''}
end
local n = tonumber(cur[2]) - 1
if n > 0 then
  redis.call('HSET', h, 'n', n)
  return {1, n, '', ''}
end
local w = tonumber(cur[5]) or 0
local waiting = (tonumber(cur[6]) or 0) > now
if w == 0 and not waiting then
  redis.call('HDEL', h, 'o', 'n', 'r', 'x')
  return 1
end
local head = ''
local qlen = w
if w > 0 then
  qlen = redis.call('LLEN', q)
  if qlen > 0 then
    local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
    for _, id in ipairs(dead) do
      redis.call('LREM', q, 1, id)
      redis.call('ZREM', qt, id)
    end
    if #dead > 0 then qlen = redis.call('LLEN', q) end
    head = redis.call('LINDEX', q, 0) or ''
  end
end
if head ~= '' and head == ARGV[4] then
  redis.call('LPOP', q)
  redis.call('ZREM', qt, head)
  local tok = string.format('%.0f', math.max(tonumber(cur[3]) + 1, t[1] * 1000000 + t[2]))
  redis.call('HSET', h, 'o', ARGV[5], 'n', 1, 'r', head, 'x', now + tonumber(ARGV[6]), 'f', tok, 'w', qlen - 1)
  return {1, 0, head, tok}
end
if qlen ~= w then redis.call('HSET', h, 'w', qlen) end
redis.call('HDEL', h, 'o', 'n', 'r', 'x')
if head ~= '' then
  if string.sub(head, 1, #ARGV[3]) ~= ARGV[3] then redis.call('PUBLISH', h .. ':wake', head) end
elseif waiting then
  redis.call('PUBLISH', h .. ':wake', '')
end
return {1, 0, head, ''}
`)

// cancelScript withdraws a waiter: it leaves the queue and, if an attempt
// of this request was granted without the client learning it (the reply
// was lost, or the call was cancelled while in flight), that grant is given
// back. If the lock is then free and the queue's head changed, the new head
// (or "") is published.
//
//	KEYS: lock hash, queue, timeouts
//	ARGV: request id, owner
//
// Replies 1 if a grant was given back, else 0.
var cancelScript = newScript("cancel", `
local h, q, qt = KEYS[1], KEYS[2], KEYS[3]
local rid = ARGV[1]
local cur = redis.call('HMGET', h, 'o', 'n', 'r', 'x')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local wasHead = redis.call('LINDEX', q, 0) == rid
redis.call('ZSCORE', qt, rid)
local undone, free = 0, not cur[1] or (tonumber(cur[4]) or 0) <= now
if not free and cur[1] == ARGV[2] and cur[3] == rid then
  undone = 1
  local n = tonumber(cur[2]) - 1
  if n > 0 then
    redis.call('HSET', h, 'n', n, 'r', '')
  else
    redis.call('HDEL', h, 'o', 'n', 'r', 'x')
    free, wasHead = true, true
  end
end
redis.call('LREM', q, 0, rid)
redis.call('ZREM', qt, rid)
local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
for _, id in ipairs(dead) do
  redis.call('LREM', q, 1, id)
  redis.call('ZREM', qt, id)
end
local qlen = redis.call('LLEN', q)
if redis.call('EXISTS', h) == 1 then
  redis.call('HSET', h, 'w', qlen)
end
if free and (wasHead or #dead > 0) then
  local head = ''
  if qlen > 0 then head = redis.call('LINDEX', q, 0) end
  redis.call('PUBLISH', h .. ':wake', head)
end
return undone
`)
