package redis

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"

	"github.com/dlock-dev/dlock/internal/redisconn"
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
// A lock is one hash, PREFIX:{NAME}, that lives only while the lock is
// held, waited on or queued for:
//
//	o  holder's owner (absent when free)
//	n  reentry count
//	r  id of the request that made or last re-entered the hold
//	x  end of the lease, server time in ms (TIME); absent when the lease
//	   ends with the hash itself (its PTTL), as after a fast-path grant
//	f  last token granted, which is also the holder's token
//	w  0 or absent: no fair queue; else the queue's length when it was
//	   last written, which scripts rewrite only when it becomes 0 or
//	   stops being 0 (it tells whether to look at the queue, not how long
//	   it is)
//	s  server time (ms) until which a waiter that is not in the fair queue
//	   may be waiting for a release notice (see below)
//
// Expiry is judged against the server's clock, the same clock Redis uses
// for PX: a hold without x is live while its hash exists, whose expiry is
// the lease end (the common path needs no TIME); the full scripts write x
// (now + PTTL) before they may make the hash outlive its lease. Fair locks also use a list (the queue, in
// arrival order) and a sorted set (each queued waiter's deadline), which
// expire a second after the last waiter's deadline.
//
// Reclamation: the hash carries a PEXPIREAT no earlier than the end of its
// lease (x), its waiter hint (s) and its fair queue (the queue's own
// expiry), and no script shortens it except to a new grant's; a release
// that frees the lock with no fair queue deletes the hash in the same
// script. So a free name without waiters keeps no key, and an abandoned
// one (its holder or its waiters gone) loses its keys by themselves, at
// most a waiter timeout plus a second after its last lease or waiter
// deadline. A hash without an expiry (written before reclamation) keeps
// it until its next grant or release.
//
// Tokens: the fence key (KEYS[4]; one per Cluster slot, also on a single
// server, and the same key as the redlock backend's) holds the highest
// token granted in its slot and is never deleted. A new token is max(fence+1, f+1, server time in µs) and
// is written to the fence key in the same script, so deleting a lock's
// hash never lets a later token of its name be smaller or equal; a
// release that deletes a hash whose f is above the fence raises the fence
// to f first. The server time keeps tokens increasing even if the fence
// key is lost (a restart without persistence, a failover to a replica
// that missed the last grants), provided the servers' clocks agree to
// better than the time between the lost grant and the next. Without
// clock tokens (see [ClockTokens]) the common path takes fence+1 by INCR
// instead, without TIME: that still starts again at the server time when
// the fence key is missing, but after a failover to a replica whose fence
// is behind it may give a lost grant's token again. The redlock backend
// keeps its fence in the same key and grants only above it, so a name used
// through both schemes on one server still gets increasing tokens.
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

// Watchers ([Backend.Watch]) register in PREFIX:{NAME}:watchers, a
// sorted set of watcher ids scored by when each counts as gone, which
// expires with its last watcher. Every script that changes a name's
// holders (a grant, a re-entry, a release, a give-back, a new value)
// publishes on PREFIX:{NAME}:watch if that key exists (watchedLua). The
// mutex's common paths stay as they were: acquireFast asks EXISTS of the
// lock hash and the watchers key in the one call it made for the hash
// alone, and leaves a watched name to the full script; releaseFast runs
// only for a hold without x, and registering a watcher writes x to the
// name's hold (as holdEnd does), so a watched hold's release takes the
// full script. The watchers key has the lock's hash tag, so a script may
// derive it from the lock's key on a Cluster too.

// watchedLua publishes a change of the name whose lock hash is KEYS[1] on
// its watch channel if a watcher is registered.
const watchedLua = `if redis.call('EXISTS', KEYS[1] .. ':watchers') == 1 then redis.call('PUBLISH', KEYS[1] .. ':watch', '') end`

// MaxToken is the largest fencing token: the scripts compute in Lua
// numbers, which are doubles, exact up to 2^53. A lock whose token f is at
// it (or that holds a count, token or expiry that is not a number) is
// foreign data: the acquire script refuses it with DLOCKFOREIGN and
// changes nothing.
const MaxToken = redisconn.MaxToken

// maxTokenLua is MaxToken in the scripts.
var maxTokenLua = strconv.FormatInt(MaxToken, 10)

// stateSource defines, for the scripts that may free or queue a lock
// (KEYS: lock hash h, queue q, timeouts, fence key fk):
//
// fenceOf(v) checks the fence key's value v (from GET) and returns it as
// a number (0 if absent), or false and an error reply for foreign data.
//
// drop(f, hw) deletes the hash of a free lock without waiters, first
// raising the fence to its token f if it is below (hw: the fence).
//
// dropDead(now) removes up to 100 fair waiters whose deadline passed from
// the queue and returns how many it removed.
//
// holdEnd(o, xv, now) returns the end (ms) of the hold whose owner and x
// fields are o and xv: x, or for a hold without x the hash's own expiry,
// which it then writes to x (so that keep may make the hash outlive the
// lease); 0 without a holder; false for a hold without x or expiry.
//
// newToken(f, hw, t) returns a new token, max(f+1, hw+1, server time in
// µs), and writes it to the fence key; t is TIME's reply.
//
// keep(now, at, w, qend) makes the hash last at least until at (ms) and,
// if it counts a fair queue (w > 0), as long as the queue does (until
// qend, when the caller just set the queue's expiry to it); it never
// shortens the hash's life. If that end has passed the hash is not kept: the
// caller drops it instead.
var stateSource = `
local h, q, qt, fk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function fenceOf(v)
  if not v then return 0 end
  local n = tonumber(v)
  if not ` + redisconn.TokenLua("n") + ` then
    return false, ` + redisconn.FenceErrorLua("fk") + `
  end
  return n
end
local function drop(f, hw)
  if f and f > hw then redis.call('SET', fk, string.format('%.0f', f)) end
  redis.call('DEL', h)
end
local function dropDead(now)
  local dead = redis.call('ZRANGEBYSCORE', qt, '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(dead) do
    redis.call('LREM', q, 1, id)
    redis.call('ZREM', qt, id)
  end
  return #dead
end
local function holdEnd(o, xv, now)
  if xv then return tonumber(xv) end
  if not o then return 0 end
  local p = redis.call('PTTL', h)
  if p < 0 then return false end
  redis.call('HSET', h, 'x', now + p)
  return now + p
end
local function newToken(f, hw, t)
  local tok = math.max(f + 1, hw + 1, t[1] * 1000000 + t[2])
  redis.call('SET', fk, string.format('%.0f', tok))
  return tok
end
local function keep(now, at, w, qend)
  if qend then
    at = math.max(at, qend)
  elseif w > 0 then
    local p = redis.call('PTTL', q)
    if p > 0 then at = math.max(at, now + p) end
  end
  if at <= now then return end
  local p = redis.call('PTTL', h)
  if p == -1 or p >= 0 and now + p < at then redis.call('PEXPIREAT', h, at) end
end
`

// acquireFast is the acquire script's common case, ahead of its
// definitions: a name without a hash (free, no waiters) and without
// watchers, and a fence key that holds a token. It grants in EXISTS, INCR, HSET and PEXPIRE and
// nothing else: the token is fence+1, and without x the lease ends with
// the hash (TIME only when the fence key is missing: then the token is
// the server time in µs, as newToken would give). Anything else falls
// through to the full script, which also reports foreign data; an INCR of
// a fence that does not hold a token is undone first.
var acquireFast = `
if redis.call('EXISTS', KEYS[1], KEYS[1] .. ':watchers') == 0 then
  local tok = redis.pcall('INCR', KEYS[4])
  if type(tok) == 'number' then
    if tok == 1 then
      local t = redis.call('TIME')
      tok = t[1] * 1000000 + t[2]
      redis.call('SET', KEYS[4], string.format('%.0f', tok))
    end
    if tok > 1 and tok <= ` + maxTokenLua + ` then
      redis.call('HSET', KEYS[1], 'o', ARGV[1], 'n', '1', 'r', ARGV[3], 'f', tok)
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return tok
    end
    redis.call('DECR', KEYS[4])
  end
end
`

// acquireClockFast is acquireFast with clock tokens ([ClockTokens]): the
// token is max(fence+1, server time in µs), as newToken gives, at the cost
// of TIME and a fence written with GETSET (and SET again when the clock
// is behind the fence). A fence that does not hold a token is put back.
var acquireClockFast = `
if redis.call('EXISTS', KEYS[1], KEYS[1] .. ':watchers') == 0 then
  local t = redis.call('TIME')
  local tok = t[1] * 1000000 + t[2]
  local old = redis.pcall('GETSET', KEYS[4], string.format('%.0f', tok))
  if type(old) ~= 'table' then
    local hw = tonumber(old or 0)
    if ` + redisconn.TokenLua("hw") + ` then
      if hw >= tok then
        tok = hw + 1
        redis.call('SET', KEYS[4], string.format('%.0f', tok))
      end
      redis.call('HSET', KEYS[1], 'o', ARGV[1], 'n', '1', 'r', ARGV[3], 'f', tok)
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return tok
    end
    redis.call('SET', KEYS[4], old)
  end
end
`

// acquireScript makes one attempt.
//
//	KEYS: lock hash, queue, timeouts, fence key
//	ARGV: owner, ttl ms, request id, mode ("t" try, "w" wait, "f" fair wait), waiter timeout ms
//
// Replies the token (an integer) for a new grant of a lock that was free
// and had no fair queue: the common case, which on a name without a hash
// takes one EXISTS, INCR, HSET and PEXPIRE (acquireFast).
// Otherwise {1, token, count} when granted, or {0, holder owner or "",
// holder token or "", wait hint ms, queue length} when not.
//
// A holder whose owner is the caller's re-enters (count+1) unless the
// request id is the one that made the hold: then the reply to this very
// request was lost and the client retried it, and the hold is returned
// unchanged. Fair waiters ("f") are queued (if already queued, their
// deadline is refreshed); on a free lock, waiters whose deadline passed
// are dropped first (behind a holder, its release drops them). A free lock with a queue goes to the queue's head only, and when dropping
// dead waiters makes another waiter the head of a free lock's queue, that
// waiter is told.
var acquireScript = newScript("acquire", acquireFast+acquireFull)

// acquireClockScript is acquireScript with clock tokens on its common path
// too ([ClockTokens]).
var acquireClockScript = newScript("acquireClock", acquireClockFast+acquireFull)

// acquireFull is the acquire script past its common path.
var acquireFull = stateSource + `
local owner, rid, mode = ARGV[1], ARGV[3], ARGV[4]
local cur = redis.call('HMGET', h, 'o', 'n', 'f', 'r', 'x', 'w', 's')
local function foreign(why) return redis.error_reply('DLOCKFOREIGN ' .. why) end
local f = tonumber(cur[3])
if not f then
  if cur[3] then return foreign('token f is not a number') end
  if redis.call('EXISTS', h) == 1 then return foreign('token f is missing') end
  f = 0
elseif f < 0 or f % 1 ~= 0 then
  return foreign('token f is not a non-negative integer')
elseif f >= ` + maxTokenLua + ` then
  return foreign('token f is at the top of the range (` + maxTokenLua + `, the largest integer a Lua number holds exactly): no later token can be given')
end
` + redisconn.HoldCheckLua("cur[1]", "cur[2]", "(cur[5] or 0)") + `
if cur[6] and not tonumber(cur[6]) or cur[7] and not tonumber(cur[7]) then
  return foreign('queue length w or waiter hint s is not a number')
end
if cur[1] and not cur[5] and redis.call('PTTL', h) < 0 then
  return foreign('a hold without expiry x has no TTL either')
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- The fence is read (and checked) before anything is written wherever a
-- new grant may follow; a hold whose lease end x is still ahead is only
-- re-entered or waited behind, which takes no token.
local hw = 0
if not (cur[1] and cur[5] and tonumber(cur[5]) > now) then
  local bad
  hw, bad = fenceOf(redis.call('GET', fk))
  if not hw then return bad end
end
local exp = now + tonumber(ARGV[2])
local x = holdEnd(cur[1], cur[5], now)
local held = cur[1] and x > now
local w = tonumber(cur[6]) or 0
local sv = tonumber(cur[7]) or 0
if not held and w == 0 then
  -- Free, no fair queue: a new grant. The token goes to HSET and into the
  -- reply as a number (exact below 2^53; Redis writes it as an integer).
  local tok = newToken(f, hw, t)
  redis.call('HSET', h, 'o', owner, 'n', '1', 'r', rid, 'x', exp, 'f', tok)
  redis.call('PEXPIREAT', h, math.max(exp, sv))
  ` + watchedLua + `
  return tok
end
if held and cur[1] == owner then
  local n = tonumber(cur[2])
  if cur[4] ~= rid then
    n = n + 1
    redis.call('HSET', h, 'n', n, 'r', rid, 'x', math.max(x, exp))
    keep(now, math.max(x, exp), w)
    ` + watchedLua + `
  end
  return {1, cur[3], n}
end
local qlen, head, old, qend = 0, false, false, false
if w > 0 or mode == 'f' and held then
  qlen = redis.call('LLEN', q)
  if qlen > 0 then
    -- Behind a holder the queue is only joined: its dead waiters are
    -- dropped by the release, which looks for the next live head. A free
    -- lock's head decides who may take it (and whom to tell, if it
    -- changed).
    if not held then
      old = redis.call('LINDEX', q, 0)
      if dropDead(now) > 0 then
        qlen = redis.call('LLEN', q)
        if qlen > 0 then head = redis.call('LINDEX', q, 0) end
      else
        head = old
      end
    end
  end
end
if held or head and head ~= rid then
  local wait = x - now
  if not held then wait = math.max(tonumber(redis.call('ZSCORE', qt, head) or now) - now, 0) end
  if mode == 'f' then
    -- ZADD adds (1) a waiter that is not queued yet, or refreshes its
    -- deadline (0).
    if redis.call('ZADD', qt, now + tonumber(ARGV[5]), rid) == 1 then
      redis.call('RPUSH', q, rid)
      qlen = qlen + 1
    end
    local last = redis.call('ZRANGE', qt, -1, -1, 'WITHSCORES')
    qend = tonumber(last[2]) + 1000
    redis.call('PEXPIREAT', q, qend)
    redis.call('PEXPIREAT', qt, qend)
  end
  local until_ = now + wait + tonumber(ARGV[5])
  if mode == 'w' and sv < until_ - tonumber(ARGV[5]) / 2 then
    sv = until_
    if qlen ~= w then
      redis.call('HSET', h, 's', until_, 'w', qlen)
    else
      redis.call('HSET', h, 's', until_)
    end
  elseif (qlen > 0) ~= (w > 0) then
    redis.call('HSET', h, 'w', qlen)
  end
  if held then keep(now, math.max(x, sv), qlen, qend) else keep(now, sv, qlen, qend) end
  if not held and head ~= old then redis.call('PUBLISH', h .. ':wake', head) end
  if held then return {0, cur[1], cur[3] or '', wait, qlen} end
  return {0, '', '', wait, qlen}
end
if head then
  redis.call('LPOP', q)
  redis.call('ZREM', qt, rid)
  qlen = qlen - 1
end
local tok = string.format('%.0f', newToken(f, hw, t))
if qlen ~= w then
  redis.call('HSET', h, 'o', owner, 'n', 1, 'r', rid, 'x', exp, 'f', tok, 'w', qlen)
else
  redis.call('HSET', h, 'o', owner, 'n', 1, 'r', rid, 'x', exp, 'f', tok)
end
if qlen == 0 then
  redis.call('PEXPIREAT', h, math.max(exp, sv))
else
  keep(now, math.max(exp, sv), qlen)
end
` + watchedLua + `
return {1, tok, 1}
`

// renewScript extends a hold.
//
//	KEYS: lock hash
//	ARGV: owner, token, ttl ms
//
// Replies {1}, or {0, holder owner or "", holder token or ""}. A hold
// without x (its lease ends with the hash) gets a new expiry, without TIME;
// otherwise x moves and the hash's expiry moves to the new lease end if
// that is later (a hash without an expiry, from before reclamation, keeps
// none).
var renewScript = newScript("renew", `
local cur = redis.call('HMGET', KEYS[1], 'o', 'f', 'x')
if not cur[3] then
  if cur[1] and cur[1] == ARGV[1] and cur[2] == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {1}
  end
  return {0, cur[1] or '', cur[2] or ''}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if (tonumber(cur[3]) or 0) <= now then
  return {0, '', ''}
end
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  local x = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'x', x)
  local p = redis.call('PTTL', KEYS[1])
  if p >= 0 and now + p < x then redis.call('PEXPIREAT', KEYS[1], x) end
  return {1}
end
return {0, cur[1] or '', cur[2] or ''}
`)

// renewBatchScript extends many holds (all in one slot on a Cluster), as
// renewScript does each.
//
//	KEYS: lock hash 1..n
//	ARGV: owner, token, ttl ms for each key in turn
//
// Replies one integer per key: 1 renewed, 0 not held by that owner and
// token, -1 the key holds another type.
var renewBatchScript = newScript("renewBatch", `
local now
local res = {}
for i, k in ipairs(KEYS) do
  local j = (i - 1) * 3
  local cur = redis.pcall('HMGET', k, 'o', 'f', 'x')
  if cur.err then
    res[i] = -1
  elseif cur[1] ~= ARGV[j + 1] or cur[2] ~= ARGV[j + 2] then
    res[i] = 0
  elseif not cur[3] then
    redis.call('PEXPIRE', k, ARGV[j + 3])
    res[i] = 1
  else
    if not now then
      local t = redis.call('TIME')
      now = t[1] * 1000 + math.floor(t[2] / 1000)
    end
    if (tonumber(cur[3]) or 0) > now then
      local x = now + tonumber(ARGV[j + 3])
      redis.call('HSET', k, 'x', x)
      local p = redis.call('PTTL', k)
      if p >= 0 and now + p < x then redis.call('PEXPIREAT', k, x) end
      res[i] = 1
    else
      res[i] = 0
    end
  end
end
return res
`)

// releaseFast is the release script's common case, ahead of its
// definitions: the last hold of a lock without x (its lease ends with the
// hash, so a hash that is there is a live lease), a fair queue or a
// waiter hint. It frees the lock as the full script would (drop), in HMGET
// and DEL: its token came from the fence key, which is at least f already.
// Anything else falls through to the full script, which reads the fields
// from cur (no second HMGET).
var releaseFast = `
local cur = redis.call('HMGET', KEYS[1], 'o', 'n', 'f', 'x', 'w', 's')
if cur[1] == ARGV[1] and cur[3] == ARGV[2] and cur[2] == '1' and not (cur[4] or cur[5] or cur[6]) then
  redis.call('DEL', KEYS[1])
  return 1
end
`

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
//	KEYS: lock hash, queue, timeouts, fence key
//	ARGV: owner, token, the releasing process's request id tag,
//	      [waiter's request id, owner, ttl ms]
//
// A lock that frees with no fair queue left loses its hash (see drop).
//
// Replies 1 when the lock freed with no fair queue and no waiter to tell
// (the common case, releaseFast: one HMGET and DEL), else {1,
// count left, queue head or "", handed-off token or ""}, or {0, holder
// owner or "", holder token or ""}.
var releaseScript = newScript("release", releaseFast+stateSource+`
local hw, bad = fenceOf(redis.call('GET', fk))
if not hw then return bad end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if (holdEnd(cur[1], cur[4], now) or 0) <= now then
  return {0, '', ''}
end
if cur[1] ~= ARGV[1] or cur[3] ~= ARGV[2] then
  return {0, cur[1] or '', cur[3] or ''}
end
if not tonumber(cur[2]) then return redis.error_reply('DLOCKFOREIGN count n of a hold is not a number') end
`+watchedLua+`
local n = tonumber(cur[2]) - 1
if n > 0 then
  redis.call('HSET', h, 'n', n)
  return {1, n, '', ''}
end
local w = tonumber(cur[5]) or 0
local sv = tonumber(cur[6]) or 0
local waiting = sv > now
local f = tonumber(cur[3])
if w == 0 and not waiting then
  drop(f, hw)
  return 1
end
local head = ''
local qlen = w
if w > 0 then
  qlen = redis.call('LLEN', q)
  if qlen > 0 then
    if dropDead(now) > 0 then qlen = redis.call('LLEN', q) end
    head = redis.call('LINDEX', q, 0) or ''
  end
end
if head ~= '' and head == ARGV[4] then
  redis.call('LPOP', q)
  redis.call('ZREM', qt, head)
  local tok = string.format('%.0f', newToken(f, hw, t))
  local exp = now + tonumber(ARGV[6])
  redis.call('HSET', h, 'o', ARGV[5], 'n', 1, 'r', head, 'x', exp, 'f', tok, 'w', qlen - 1)
  keep(now, math.max(exp, sv), qlen - 1)
  return {1, 0, head, tok}
end
if head == '' then
  -- No fair queue left. Waiters that are not queued hear the release and
  -- try again; the hash stays until their hint s ends, so that the
  -- release of whichever of them gets the lock tells the others (a
  -- process wakes one waiter per notice). Without them the hash goes.
  if not waiting then
    drop(f, hw)
    return {1, 0, '', ''}
  end
  if w > 0 then redis.call('HSET', h, 'w', 0) end
  redis.call('HDEL', h, 'o', 'n', 'r', 'x')
  keep(now, sv, 0)
  redis.call('PUBLISH', h .. ':wake', '')
  return {1, 0, '', ''}
end
redis.call('HDEL', h, 'o', 'n', 'r', 'x')
keep(now, sv, qlen)
if string.sub(head, 1, #ARGV[3]) ~= ARGV[3] then redis.call('PUBLISH', h .. ':wake', head) end
return {1, 0, head, ''}
`)

// cancelScript withdraws a waiter: it leaves the queue and, if an attempt
// of this request was granted without the client learning it (the reply
// was lost, or the call was cancelled while in flight), that grant is given
// back. If the lock is then free and the queue's head changed, the new head
// (or "") is published.
//
//	KEYS: lock hash, queue, timeouts, fence key
//	ARGV: request id, owner
//
// A lock left free with no queue and no waiter hint loses its hash.
//
// Replies 1 if a grant was given back, else 0.
var cancelScript = newScript("cancel", stateSource+`
local rid = ARGV[1]
local cur = redis.call('HMGET', h, 'o', 'n', 'r', 'x', 'f', 's')
local hw, bad = fenceOf(redis.call('GET', fk))
if not hw then return bad end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local wasHead = redis.call('LINDEX', q, 0) == rid
redis.call('ZSCORE', qt, rid)
local x = holdEnd(cur[1], cur[4], now) or 0
local undone, free = 0, not cur[1] or x <= now
if not free and cur[1] == ARGV[2] and cur[3] == rid then
  if not tonumber(cur[2]) then return redis.error_reply('DLOCKFOREIGN count n of a hold is not a number') end
  undone = 1
  `+watchedLua+`
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
local dead = dropDead(now)
local qlen = redis.call('LLEN', q)
if redis.call('EXISTS', h) == 1 then
  local sv = tonumber(cur[6]) or 0
  if free and qlen == 0 and sv <= now then
    drop(tonumber(cur[5]), hw)
  else
    redis.call('HSET', h, 'w', qlen)
    if free then keep(now, sv, qlen) else keep(now, math.max(x, sv), qlen) end
  end
end
if free and (wasHead or dead > 0) then
  local head = ''
  if qlen > 0 then head = redis.call('LINDEX', q, 0) end
  redis.call('PUBLISH', h .. ':wake', head)
end
return undone
`)
