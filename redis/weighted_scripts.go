package redis

import (
	"strconv"

	"github.com/dlock-dev/dlock"
)

// The scripts of the weighted kinds (semaphores, read-write locks): one
// per operation, as for the mutex, whose scripts they leave untouched.
//
// A weighted name's state lives under the lock's hash tag, in the mutex's
// hash and queue keys and two of its own (KEYS: h, q, qt, fk, H, E):
//
//	h   PREFIX:{NAME}          hash: the state
//	      o  "" — no owner is "", so the mutex's scripts see a hold of
//	         nobody: they refuse to grant (the hash has no token f) and
//	         never drop or re-own the hash
//	      x  the end of the state (ms, server time), which is also every
//	         state key's PEXPIREAT: to the mutex's scripts, the end of
//	         that hold of nobody
//	      k  kind (1 semaphore, 2 read-write lock, 3 election), l  limit,
//	      u  the weight held by the holders in H
//	      v  an election's leader value, written with its grant and by
//	         Proclaim, deleted when the hold ends
//	H   PREFIX:{NAME}:holders  hash: owner → "weight count token request-id"
//	E   PREFIX:{NAME}:expiry   zset: owner scored by the end of its lease (ms,
//	                           server time)
//	q   PREFIX:{NAME}:queue    list: waiters "request-id:weight", in arrival order
//	qt  PREFIX:{NAME}:timeouts zset: the same entries scored by the time they
//	                           count as dead (the Fair queue's waiter timeout)
//	fk  the fence key, shared with the mutex: every grant's token is
//	    max(fence+1, server time in µs) and is written back to it
//
// The grant rule, in one script: the holders' weights u plus the request
// fit in l, and the request is the queue's head or the queue is empty.
// Holders whose lease ended are pruned first (up to 64 per call, earliest
// first; u is then an overestimate until the next call, which errs on the
// side of refusing). A script that frees weight or changes the queue's
// head publishes the head's request id on the lock's channel if the head
// now fits, so a release wakes the first waiter only and a granted head
// wakes the next. Waiters whose deadline passed are dropped as in the Fair
// queue, and their successor is woken.
//
// Reclamation: every state key expires at x, the latest of the holders'
// lease ends and the queue's expiry; a script that leaves no holder and no
// waiter deletes them all. Only the fence key outlives the name's state.
//
// Every script reads each key it may write, and checks what it read, before
// its first write: data dlock did not write (a type, a kind, a limit, a
// weight held above the limit, a holder record it cannot read) fails the
// script with DLOCKFOREIGN and changes nothing.

// weightedKindsLua is the largest kind the scripts keep.
var weightedKindsLua = strconv.Itoa(int(dlock.KindElection))

// electionLua is the kind of an election in the scripts.
var electionLua = strconv.Itoa(int(dlock.KindElection))

// wstateSource follows stateSource in every weighted script. ARGV[1] is
// the caller's owner. It reads and checks the state and defines:
//
//	now, t   server time in ms, TIME's reply
//	hw       the fence
//	mutex    the name holds a mutex's state
//	kind, limit, used   the recorded kind, limit, weight held (kind false: no state)
//	mine     the caller's unexpired holder record {w, c, tok, rid}, or nil
//	dead, deadW   owners whose lease ended (up to 64) and their weight
//	qlen     the queue's length
//	rec(v)   parses a holder record (nil if it is not one)
//	fmtRec(w, c, tok, rid)
//	prune()  drops the dead holders
//	settle() writes the state (or deletes it when nothing is held or queued)
//	wake()   publishes the queue's head if it fits
//	watched() publishes a change of the holders to the name's watchers, if any
var wstateSource = `
local H, E = KEYS[5], KEYS[6]
local function foreign(why) return redis.error_reply('DLOCKFOREIGN ' .. why) end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local cur = redis.call('HMGET', h, 'o', 'k', 'l', 'u', 'f')
local hw, badFence = fenceOf(redis.call('GET', fk))
if not hw then return badFence end
local kind, limit, used, mutex = false, 0, 0, false
if cur[2] then
  kind, limit, used = tonumber(cur[2]), tonumber(cur[3]), tonumber(cur[4])
  if not kind or kind < 1 or kind > ` + weightedKindsLua + ` or kind % 1 ~= 0 then
    return foreign('kind k is not a weighted kind')
  elseif not limit or limit < 1 or limit > ` + strconv.Itoa(dlock.MaxLimit) + ` or limit % 1 ~= 0 then
    return foreign('limit l is not an integer in [1, ` + strconv.Itoa(dlock.MaxLimit) + `]')
  elseif not used or used < 0 or used % 1 ~= 0 then
    return foreign('weight held u is not a non-negative integer')
  elseif used > limit then
    return foreign('weight held u (' .. cur[4] .. ') is above the limit l (' .. cur[3] .. ')')
  end
elseif cur[5] then
  mutex = true
elseif redis.call('EXISTS', h) == 1 then
  return foreign('kind k is missing')
end
local function rec(v)
  if not v then return nil end
  local w, c, tok, rid = string.match(v, '^(%d+) (%d+) (%d+) (%x*)$')
  w, c, tok = tonumber(w), tonumber(c), tonumber(tok)
  if not w or w < 1 or w > limit or c < 1 or tok >= ` + maxTokenLua + ` then return nil end
  return {w = w, c = c, tok = tok, rid = rid}
end
local function fmtRec(w, c, tok, rid)
  return string.format('%.0f %.0f %.0f %s', w, c, tok, rid)
end
local own = redis.call('HGET', H, ARGV[1])
local ownEnd = tonumber(redis.call('ZSCORE', E, ARGV[1]) or 0)
local mine = nil
if own and kind then
  mine = rec(own)
  if not mine then return foreign('the holder record of ' .. ARGV[1] .. ' is not "weight count token id" within the limit') end
  if ownEnd <= now then mine = nil end
end
local dead = redis.call('ZRANGEBYSCORE', E, '-inf', now, 'LIMIT', 0, 64)
local deadW = 0
if #dead > 0 and kind then
  local rs = redis.call('HMGET', H, unpack(dead))
  for i = 1, #dead do
    if rs[i] then
      local r = rec(rs[i])
      if not r then return foreign('the holder record of ' .. dead[i] .. ' is not "weight count token id" within the limit') end
      deadW = deadW + r.w
    end
  end
  if deadW > used then return foreign('weight held u is below the weights of its holders') end
end
local qlen = redis.call('LLEN', q)
redis.call('ZCARD', qt)
local function prune()
  if #dead > 0 then
    redis.call('HDEL', H, unpack(dead))
    redis.call('ZREM', E, unpack(dead))
    used = used - deadW
    dead, deadW = {}, 0
  end
end
local function settle()
  if used <= 0 and qlen == 0 then
    redis.call('DEL', h, H, E, qt)
    return
  end
  local at = now + 1
  local last = redis.call('ZRANGE', E, -1, -1, 'WITHSCORES')
  if last[2] then at = math.max(at, tonumber(last[2])) end
  if qlen > 0 then
    local p = redis.call('PTTL', q)
    if p > 0 then at = math.max(at, now + p) end
  end
  redis.call('HSET', h, 'o', '', 'x', at, 'k', kind, 'l', limit, 'u', used)
  redis.call('PEXPIREAT', h, at)
  redis.call('PEXPIREAT', H, at)
  redis.call('PEXPIREAT', E, at)
end
local function wake(skip)
  if qlen == 0 then return end
  local e = redis.call('LINDEX', q, 0)
  if not e or e == skip then return end
  local rid, w = string.match(e, '^(%x*):(%d+)$')
  if rid and used + tonumber(w) <= limit then redis.call('PUBLISH', h .. ':wake', rid) end
end
local function watched() ` + watchedLua + ` end
`

// wacquireScript makes one attempt of a weighted request.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, ttl ms, request id, mode ("t" try, "f" wait in the queue),
//	      waiter timeout ms, kind, limit, weight, value (an election's)
//
// Replies {1, token, count} when granted; {0, owner and token of the
// holder whose lease ends first (or ""), wait hint ms (-1: none), queue
// length, weight held, limit, 1 if the request fits but waiters are
// first, that holder's remaining lease ms} when not; {-1, kind, limit} when the name is in use as another
// kind or limit (nothing changed); {-2, weight held} when the owner holds
// less weight than it asks (an upgrade; nothing changed).
//
// The owner's unexpired hold is re-entered (count+1, the same token)
// unless the request id is the one that made or last re-entered it: then
// the reply to this very request was lost and it is answered again. A
// waiting request ("f") that is refused takes its place at the queue's
// tail, or refreshes its deadline there. A name whose state holds nothing
// live takes the request's kind and limit.
var wacquireScript = newScript("wacquire", stateSource+wstateSource+`
local ttl, rid, mode, wt = tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local akind, alimit, weight = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if mutex then return {-1, 0, 1} end
if kind and (kind ~= akind or limit ~= alimit) then
  if redis.call('ZCARD', E) > #dead or redis.call('ZCOUNT', qt, string.format('(%.0f', now), '+inf') > 0 then
    return {-1, kind, limit}
  end
  -- Nothing live: the name starts anew with this request's shape.
  redis.call('DEL', h, H, E, q, qt)
  kind, mine, dead, deadW, used, qlen = false, nil, {}, 0, 0, 0
end
if not kind then
  -- A new state: whatever a lost state left in H and E goes.
  redis.call('DEL', H, E)
  kind, limit, used, dead, deadW = akind, alimit, 0, {}, 0
end
prune()
local before = false
if qlen > 0 then
  before = redis.call('LINDEX', q, 0)
  if dropDead(now) > 0 then qlen = redis.call('LLEN', q) end
end
local entry = rid .. ':' .. ARGV[8]
if mine then
  if weight > mine.w then return {-2, mine.w} end
  local c = mine.c
  if mine.rid ~= rid then
    c = c + 1
    redis.call('HSET', H, ARGV[1], fmtRec(mine.w, c, mine.tok, rid))
    redis.call('ZADD', E, math.max(ownEnd, now + ttl), ARGV[1])
    watched()
  end
  settle()
  if qlen > 0 and redis.call('LINDEX', q, 0) ~= before then wake(entry) end
  return {1, string.format('%.0f', mine.tok), c}
end
local head = false
if qlen > 0 then head = redis.call('LINDEX', q, 0) end
local fits = used + weight <= limit
if fits and (not head or head == entry) then
  if head then
    redis.call('LPOP', q)
    redis.call('ZREM', qt, entry)
    qlen = qlen - 1
  end
  local tok = newToken(0, hw, t)
  redis.call('HSET', H, ARGV[1], fmtRec(weight, 1, tok, rid))
  redis.call('ZADD', E, now + ttl, ARGV[1])
  used = used + weight
  settle()
  if kind == `+electionLua+` then redis.call('HSET', h, 'v', ARGV[9]) end
  watched()
  if head or before then wake(entry) end
  return {1, string.format('%.0f', tok), 1}
end
if mode == 'f' then
  if not redis.call('ZSCORE', qt, entry) then
    redis.call('RPUSH', q, entry)
    qlen = qlen + 1
  end
  redis.call('ZADD', qt, now + wt, entry)
  local last = redis.call('ZRANGE', qt, -1, -1, 'WITHSCORES')
  local gone = tonumber(last[2]) + 1000
  redis.call('PEXPIREAT', q, gone)
  redis.call('PEXPIREAT', qt, gone)
end
settle()
if head and head ~= before then wake(entry) end
local first = redis.call('ZRANGE', E, 0, 0, 'WITHSCORES')
local ho, htok, hint, httl = '', '', -1, 0
if first[1] then
  ho = first[1]
  local r = rec(redis.call('HGET', H, ho))
  if r then htok = string.format('%.0f', r.tok) end
  httl = math.max(tonumber(first[2]) - now, 0)
  hint = httl
end
local qhead = false
if qlen > 0 then qhead = redis.call('LINDEX', q, 0) end
if qhead and qhead ~= entry then
  -- Behind another waiter: look again when the head would count as dead.
  hint = math.max(tonumber(redis.call('ZSCORE', qt, qhead) or now) - now, 0)
end
local blocked = 0
if fits then blocked = 1 end
return {0, ho, htok, hint, qlen, used, limit, blocked, httl}
`)

// wrenewScript extends a weighted hold.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, token, ttl ms
//
// Replies 1, or 0 if the owner does not hold the name with that token.
var wrenewScript = newScript("wrenew", stateSource+wstateSource+`
if not mine or string.format('%.0f', mine.tok) ~= ARGV[2] then return 0 end
local at = now + tonumber(ARGV[3])
redis.call('ZADD', E, at, ARGV[1])
local p = redis.call('PTTL', h)
if p >= 0 and now + p < at then
  redis.call('HSET', h, 'x', at)
  redis.call('PEXPIREAT', h, at)
  redis.call('PEXPIREAT', H, at)
  redis.call('PEXPIREAT', E, at)
end
return 1
`)

// wreleaseScript gives up one hold of a weighted name; when the owner's
// count reaches zero its weight is freed and the queue's head, if it now
// fits, is woken.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, token
//
// Replies the count left (0: the hold ended), or -1 if the owner does not
// hold the name with that token.
var wreleaseScript = newScript("wrelease", stateSource+wstateSource+`
if not mine or string.format('%.0f', mine.tok) ~= ARGV[2] then return -1 end
watched()
if mine.c > 1 then
  redis.call('HSET', H, ARGV[1], fmtRec(mine.w, mine.c - 1, mine.tok, mine.rid))
  return mine.c - 1
end
prune()
redis.call('HDEL', H, ARGV[1])
redis.call('ZREM', E, ARGV[1])
if kind == `+electionLua+` then redis.call('HDEL', h, 'v') end
used = used - mine.w
if qlen > 0 and dropDead(now) > 0 then qlen = redis.call('LLEN', q) end
settle()
wake(false)
return 0
`)

// wcancelScript withdraws a weighted waiter: its queue entry goes, and a
// grant its request id made without the client learning it (a lost reply)
// is given back. The queue's head is woken if it now fits.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, request id, weight
//
// Replies 1 if a grant was given back, else 0.
var wcancelScript = newScript("wcancel", stateSource+wstateSource+`
if mutex or not kind then return 0 end
local entry = ARGV[2] .. ':' .. ARGV[3]
redis.call('LREM', q, 0, entry)
redis.call('ZREM', qt, entry)
local undone = 0
if mine and mine.rid == ARGV[2] then
  undone = 1
  watched()
  if mine.c > 1 then
    redis.call('HSET', H, ARGV[1], fmtRec(mine.w, mine.c - 1, mine.tok, ''))
  else
    redis.call('HDEL', H, ARGV[1])
    redis.call('ZREM', E, ARGV[1])
    if kind == `+electionLua+` then redis.call('HDEL', h, 'v') end
    used = used - mine.w
  end
end
prune()
qlen = redis.call('LLEN', q)
if qlen > 0 and dropDead(now) > 0 then qlen = redis.call('LLEN', q) end
settle()
wake(false)
return undone
`)

// wdowngradeScript lowers the weight of a hold in place (a writer becoming
// a reader): the token and count stay, and the queue's head is woken if it
// now fits.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, token, weight
//
// Replies 1; 0 if the owner does not hold the name with that token; {-2,
// weight held} if the weight asked is above it.
var wdowngradeScript = newScript("wdowngrade", stateSource+wstateSource+`
if not mine or string.format('%.0f', mine.tok) ~= ARGV[2] then return 0 end
local w = tonumber(ARGV[3])
if w > mine.w then return {-2, mine.w} end
redis.call('HSET', H, ARGV[1], fmtRec(w, mine.c, mine.tok, mine.rid))
used = used - (mine.w - w)
prune()
if qlen > 0 and dropDead(now) > 0 then qlen = redis.call('LLEN', q) end
settle()
wake(false)
watched()
return 1
`)

// wproclaimScript replaces the value of an election's hold and tells the
// name's watchers.
//
//	KEYS: h, q, qt, fk, H, E
//	ARGV: owner, token, value
//
// Replies 1; 0 if the owner does not hold the name with that token; -1 if
// the name is not an election.
var wproclaimScript = newScript("wproclaim", stateSource+wstateSource+`
if not mine or string.format('%.0f', mine.tok) ~= ARGV[2] then return 0 end
if kind ~= `+electionLua+` then return -1 end
redis.call('HSET', h, 'v', ARGV[3])
watched()
return 1
`)
