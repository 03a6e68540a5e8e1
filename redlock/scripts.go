package redlock

import (
	"strconv"

	"github.com/dlock-dev/dlock/internal/redisconn"
)

// The scripts run on each master on its own. A lock is one hash per master,
// PREFIX:{NAME}, that lives while the lock is held or promised there:
//
//	o  holder's owner (absent when free)
//	n  reentry count
//	g  id of the acquisition that made the hold (unchanged by reentry)
//	x  end of the lease, the master's time in ms (TIME)
//	p  the waiter a free lock is promised to, until the time in ms pt
//	   (see releaseScript)
//	f  the fence: the last token written to this master, which is the
//	   holder's token once the grant was fenced, and raised by a release
//	   above the released token while the hash stays (releaseScript)
//
// Expiry is judged against the master's own clock (TIME), the clock Redis
// uses for PX too.
//
// Reclamation: the hash carries a PEXPIREAT no earlier than its lease end
// x and its promise time pt, which no script shortens; a release or cancel
// that leaves the lock free and promised to nobody deletes it. The queues
// expire a second after their last waiter's deadline, as before. So a
// free name keeps nothing, and an abandoned one loses its keys by Redis's
// own expiry.
//
// Tokens: the fence key PREFIX:fence:{TAG} (the last KEYS entry; TAG is
// the hash tag of the name's Cluster slot, so at most 16384 keys per
// master) holds the highest token or floor written on this master for any
// name of the slot, raised by every script that writes f, and never
// deleted. A name's fence is f while its hash has one, else the fence key:
// so a proposal is checked against the name's own last token while the
// name is in use, and against every earlier token of its slot once its
// hash is gone, and tokens of a name still only increase across
// reclamation.

// MaxToken is the largest fencing token: the scripts compare fences as
// Lua numbers, which are doubles, exact up to 2^53. A master whose fence
// f is at it (or whose hash holds a count, fence or expiry that is not a
// number) holds foreign data: the acquire script refuses it with
// DLOCKFOREIGN before any write.
const MaxToken = redisconn.MaxToken

// maxTokenLua is MaxToken in the scripts.
var maxTokenLua = strconv.FormatInt(MaxToken, 10)

// stateSource defines, for the scripts (KEYS[1] the lock hash h, the last
// KEYS entry the fence key fk), after a GET of the fence key into hwv:
//
// hw: the fence key's value (0 if absent); the script returns the error
// reply bad instead of going on when it is not a token.
//
// raise(v) raises the fence key to v (a number) if it is below.
//
// keep(now, at) makes the hash last at least until at (ms); it never
// shortens its life, and leaves it alone if at has passed (the caller
// drops it instead).
//
// drop(f) deletes the hash, first raising the fence key to its fence f.
var stateSource = `
local h, fk = KEYS[1], KEYS[#KEYS]
local hwv = redis.call('GET', fk)
local hw = tonumber(hwv or '0')
local bad = false
if not ` + redisconn.TokenLua("hw") + ` then
  bad = ` + redisconn.FenceErrorLua("fk") + `
end
local function raise(v)
  if v and v > hw then
    redis.call('SET', fk, string.format('%.0f', v))
    hw = v
  end
end
local function keep(now, at)
  if at <= now then return end
  local p = redis.call('PTTL', h)
  if p == -1 or p >= 0 and now + p < at then redis.call('PEXPIREAT', h, at) end
end
local function drop(f)
  raise(f)
  redis.call('DEL', h)
end
`

// acquireScript makes one attempt on one master.
//
//	KEYS: lock hash, queue (zset: fair waiter id -> ticket), deadlines (zset: id -> ms),
//	      wait queue (zset: other waiter id -> ticket), its deadlines, fence key
//	ARGV: owner, ttl ms, acquisition id, mode ("t" try, "w" wait, "f" fair wait), ticket, waiter timeout ms, proposed token, waiter id
//
// Replies {1, token, 1, id} for a new hold, whose token (the proposed one)
// is now the master's fence; {3, f} when the lock is free but the proposed
// token is not above the fence f (nothing changed: the client proposes
// again above f); {2, f, count, id of the hold} for a reentry; {0, holder,
// holder's f, remaining ms} when held by another; and {0, "", f, 0} when
// free but promised to the head of the fair queue, and {0, "", f,
// remaining ms} when promised for a moment to the waiter that the last
// release named. A request of the
// acquisition that already holds the master (a second round) raises the
// fence to its new proposal.
//
// Fair waiters queue by ticket (their arrival time), so that the queues of
// all masters agree on the order; a free lock with a queue goes to its head
// only. Waiters whose deadline passed are dropped first (behind a holder,
// by its release). A waiter keeps
// its id over its attempts, while each attempt has an acquisition id of its
// own: the release of one attempt's grants must never match another's.
//
// A waiter that is not fair and finds the lock held, promised to another
// or behind a fair queue joins the wait queue, also by ticket: it decides nothing about grants, only which waiter the
// release notice names, so that one waiter tries instead of all of them
// colliding on the masters.
var acquireScript = newScript(acquireFast + stateSource + `
if bad then return bad end
local q, qd = KEYS[2], KEYS[3]
local owner, ttl, gid, mode, qid = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[8]
local cur = redis.call('HMGET', h, 'o', 'n', 'g', 'x', 'f', 'p', 'pt')
local function foreign(why) return redis.error_reply('DLOCKFOREIGN ' .. why) end
local f = tonumber(cur[5])
if cur[5] and not f then return foreign('fence f is not a number') end
if f and (f < 0 or f % 1 ~= 0) then return foreign('fence f is not a non-negative integer') end
if f and f >= ` + maxTokenLua + ` then
  return foreign('fence f is at the top of the range (` + maxTokenLua + `, the largest integer a Lua number holds exactly): no later token can be given')
end
` + redisconn.HoldEndLua("h", "cur[1]", "cur[4]") + redisconn.HoldCheckLua("cur[1]", "cur[2]", "cur[4]") + `
if cur[7] and not tonumber(cur[7]) then return foreign('promise time pt is not a number') end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local function enqueue(zq, zd)
  -- NX: a waiter keeps its ticket (its place) once queued.
  redis.call('ZADD', zq, 'NX', ARGV[5], qid)
  local dl = now + tonumber(ARGV[6])
  redis.call('ZADD', zd, dl, qid)
  local last = redis.call('ZRANGE', zd, -1, -1, 'WITHSCORES')
  local gone = math.max(dl, tonumber(last[2])) + 1000
  redis.call('PEXPIREAT', zq, gone)
  redis.call('PEXPIREAT', zd, gone)
end
local x = tonumber(cur[4]) or 0
local held = cur[1] and x > now
local p = tonumber(ARGV[7])
-- The name's fence: its own while its hash has one, else its slot's.
local fv = cur[5] or string.format('%.0f', hw)
local fn = tonumber(fv)
if held and cur[1] == owner and cur[3] == gid then
  if fn < p then
    redis.call('HSET', h, 'f', ARGV[7], 'x', math.max(x, now + ttl))
    raise(p)
    keep(now, math.max(x, now + ttl))
    return {1, ARGV[7], tonumber(cur[2]), gid}
  end
  return {3, fv}
end
if held and cur[1] == owner then
  local n = tonumber(cur[2]) + 1
  redis.call('HSET', h, 'n', n, 'x', math.max(x, now + ttl))
  keep(now, math.max(x, now + ttl))
  return {2, cur[5] or '0', n, cur[3] or ''}
end
local head = false
if held then
  -- Behind a holder only joining the queue matters: its release drops
  -- the dead waiters as it looks for the head to notify.
  if mode == 'f' then enqueue(q, qd) end
elseif mode == 'f' or redis.call('EXISTS', q) == 1 then
  local dead = redis.call('ZRANGEBYSCORE', qd, '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(dead) do
    redis.call('ZREM', q, id)
    redis.call('ZREM', qd, id)
  end
  if mode == 'f' then
    enqueue(q, qd)
  end
  head = redis.call('ZRANGE', q, 0, 0)[1]
end
local promised = cur[6] and cur[6] ~= qid and (tonumber(cur[7]) or 0) > now
-- A waiter that is not fair queues wherever it cannot have the lock now,
-- behind a fair queue too: a release with nobody queued sends no notice.
if (held or promised or head and head ~= qid) and mode == 'w' and qid ~= '' then
  enqueue(KEYS[4], KEYS[5])
end
if held then
  return {0, cur[1], fv, x - now}
end
if head and head ~= qid then
  return {0, '', fv, 0}
end
if promised then
  return {0, '', fv, tonumber(cur[7]) - now}
end
if fn >= p then
  return {3, fv}
end
redis.call('HSET', h, 'o', owner, 'n', 1, 'g', gid, 'x', now + ttl, 'f', ARGV[7])
raise(p)
redis.call('PEXPIREAT', h, math.max(now + ttl, tonumber(cur[7]) or 0))
return {1, ARGV[7], 1, gid}
`)

// acquireFast is the acquire script's common case, ahead of its
// definitions: a request for a lock without a hash (free, promised to
// nobody) and without a fair queue, whose fence key holds a token below
// the proposal. It grants in EXISTS, SET … GET (the proposal goes to the
// fence key as the old value comes back), TIME, HSET and PEXPIREAT, with
// the reply and the keys the full script would leave: a fair waiter also
// becomes the whole fair queue, as it would join it there. Anything else
// (a stale proposal, or foreign data) puts the fence key back as it was,
// in the same script, and falls through to the full script.
var acquireFast = `
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  local old = redis.call('SET', KEYS[#KEYS], ARGV[7], 'KEEPTTL', 'GET')
  local hw = tonumber(old or '0')
  if ` + redisconn.TokenLua("hw") + ` and hw < tonumber(ARGV[7]) then
    local t = redis.call('TIME')
    local now = t[1] * 1000 + math.floor(t[2] / 1000)
    local x = now + tonumber(ARGV[2])
    redis.call('HSET', KEYS[1], 'o', ARGV[1], 'n', 1, 'g', ARGV[3], 'x', x, 'f', ARGV[7])
    redis.call('PEXPIREAT', KEYS[1], x)
    if ARGV[4] == 'f' then
      local dl = now + tonumber(ARGV[6])
      redis.call('ZADD', KEYS[2], ARGV[5], ARGV[8])
      redis.call('ZADD', KEYS[3], dl, ARGV[8])
      redis.call('PEXPIREAT', KEYS[2], dl + 1000)
      redis.call('PEXPIREAT', KEYS[3], dl + 1000)
    end
    return {1, ARGV[7], 1, ARGV[3]}
  end
  ` + restoreFenceLua + `
end
`

// restoreFenceLua puts the fence key back to old, the value a SET … GET of
// a fast path read (nil: the key was absent), when the fast path does not
// apply after all.
const restoreFenceLua = `if old then redis.call('SET', KEYS[#KEYS], old, 'KEEPTTL') else redis.call('DEL', KEYS[#KEYS]) end`

// fenceScript writes a new grant's token to a master that granted it.
//
//	KEYS: lock hash, queue, deadlines, wait queue, its deadlines, fence key
//	ARGV: owner, acquisition id, token, waiter id ("" for none)
//
// Replies 1 if the master still holds the grant (its fence and its fence
// key are then at least the token), else 0. The grant's waiter leaves the
// queues.
var fenceScript = newScript(stateSource + `
if bad then return bad end
if ARGV[4] ~= '' then
  for k = 2, 5 do
    redis.call('ZREM', KEYS[k], ARGV[4])
  end
end
local cur = redis.call('HMGET', KEYS[1], 'o', 'g', 'x', 'f')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if cur[1] == ARGV[1] and cur[2] == ARGV[2] and (tonumber(cur[3]) or 0) > now then
  if (tonumber(cur[4]) or 0) < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'f', ARGV[3])
  end
  raise(tonumber(ARGV[3]))
  return 1
end
return 0
`)

// renewScript extends fenced holds on one master: one for Renew, many for
// RenewBatch (one call per master for all the holds due). A master where a
// lock is free and has seen no later token (it answered the acquisition
// too late, or restarted empty, or its copy of the hold expired) takes the
// hold again, so that a hold granted by a bare quorum spreads to the other
// masters and survives the loss of one of them.
//
// The fence of a lock without a hash is its fence key's. A hold whose keys
// hold foreign data is left alone and answered with an error reply
// (DLOCKFOREIGN, or WRONGTYPE from Redis); the others are renewed.
//
//	KEYS: lock hash and fence key of each hold in turn
//	ARGV: owner, token, ttl ms and acquisition id of each hold in turn
//
// Replies one entry per hold: 1, 0 when the master does not hold it, or
// the error.
var renewScript = newScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local function renew(h, fk, owner, tok, x, gid)
  local hwv = redis.pcall('GET', fk)
  if type(hwv) == 'table' then return hwv end
  local hw = tonumber(hwv or '0')
  if not ` + redisconn.TokenLua("hw") + ` then
    return ` + redisconn.FenceErrorLua("fk") + `
  end
  local cur = redis.pcall('HMGET', h, 'o', 'f', 'x')
  if cur.err then return cur end
  ` + redisconn.HoldEndLua("h", "cur[1]", "cur[3]") + `  local live = cur[1] and (tonumber(cur[3]) or 0) > now
  if live and cur[1] == owner and cur[2] == tok then
    redis.call('HSET', h, 'x', x)
  elseif not live and (tonumber(cur[2]) or hw) <= tonumber(tok) then
    redis.call('HSET', h, 'o', owner, 'n', 1, 'g', gid, 'x', x, 'f', tok)
    if tonumber(tok) > hw then redis.call('SET', fk, tok) end
  else
    return 0
  end
  local p = redis.call('PTTL', h)
  if p == -1 or p >= 0 and now + p < x then redis.call('PEXPIREAT', h, x) end
  return 1
end
local res = {}
for i = 1, #KEYS - 1, 2 do
  local j = (i - 1) * 2
  res[#res + 1] = renew(KEYS[i], KEYS[i + 1], ARGV[j + 1], ARGV[j + 2], now + tonumber(ARGV[j + 3]), ARGV[j + 4])
end
return res
`)

// notifySource defines notify(channel, id), which sends a release notice
// for waiter id on the lock's channel: on the channel itself if id is ""
// (every waiter of the lock hears it), else on the channel of the
// waiter's Backend, the channel followed by ":" and the first 16 bytes of
// the id (see notices).
const notifySource = `
local function notify(ch, id)
  if id == '' then
    redis.call('PUBLISH', ch, '')
  else
    redis.call('PUBLISH', ch .. ':' .. string.sub(id, 1, 16), id)
  end
end
`

// releaseScript gives up one hold on one master: the hold of owner that has
// the token as its fence or the acquisition id (a grant that was never
// fenced there). When the lock frees it publishes on the lock's channel.
//
//	KEYS: lock hash, queue, deadlines, wait queue, its deadlines, fence key
//	ARGV: owner, token ("" for none), acquisition id, channel, waiter id ("" for none), floor ("" for none), promise ms,
//	      [id of a waiter whose attempt follows the release in its pipeline: it is not notified]
//
// Replies {1, count left}, or {0} when the master does not hold it. The
// waiter, if any, leaves the queues. The notice of a lock that freed
// names the head of the fair queue, or if there is none the head of the
// wait queue (after dropping waiters whose deadline passed), or is empty
// when the queues held only such waiters: only that waiter needs to try.
// With no queue at all there is no notice (see releaseFast). The head of the
// wait queue has the lock promised for the promise time (the node
// timeout), so that it is not beaten to it by a newcomer that needs no
// notice, and only then may anyone take it again; a waiter that does not
// try (it died) holds up the others no longer than that. The release of a
// waiter's hold on a master where the waiter does not hold it, but the
// free lock was to go to it (it is the fair head, or was promised the
// lock), hands the lock on to the next waiter in the same way: else the
// masters would keep it for different waiters, and the next attempt would
// split them. When the lock is free on the master afterwards (released,
// or not held at all), its fence is raised to at least the floor: the
// release of a hold with token T raises it to T+1, and the giving back of
// a failed attempt to its highest proposed token. So an acquisition or
// renewal of that hold still on its way to the master (it was paused, or
// the link was slow) is refused when it arrives after the release,
// instead of making a hold nobody releases. The floor goes to the fence
// key, and to f while the hash stays. A lock left free and promised to
// nobody loses its hash.
var releaseScript = newScript(releaseFast + notifySource + stateSource + `
if bad then return bad end
local queued = {}
local wasHead = false
-- (nfair and nwait are releaseFast's counts: nothing wrote since.)
queued[2], queued[4] = nfair > 0, nwait == 1
for k = 2, 4, 2 do
  if queued[k] and ARGV[5] ~= '' then
    if k == 2 then
      wasHead = redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[5]
    end
    redis.call('ZREM', KEYS[k], ARGV[5])
    redis.call('ZREM', KEYS[k + 1], ARGV[5])
  end
end
local cur = redis.call('HMGET', h, 'o', 'n', 'g', 'x', 'f', 'p', 'pt')
` + redisconn.HoldEndLua("h", "cur[1]", "cur[4]") + `local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local live = cur[1] and (tonumber(cur[4]) or 0) > now
local floor = tonumber(ARGV[6])
local pt = tonumber(cur[7]) or 0
-- settle keeps the hash of a free lock while it is promised, else drops
-- it (with the fence raised to its f and the floor).
local function settle()
  raise(floor)
  if redis.call('EXISTS', h) == 0 then return end
  if pt > now then
    keep(now, pt)
  else
    drop(tonumber(redis.call('HGET', h, 'f')))
  end
end
local function handoff()
  local head = ''
  for k = 2, 4, 2 do
    if head == '' and queued[k] then
      local dead = redis.call('ZRANGEBYSCORE', KEYS[k + 1], '-inf', now, 'LIMIT', 0, 100)
      for _, id in ipairs(dead) do
        redis.call('ZREM', KEYS[k], id)
        redis.call('ZREM', KEYS[k + 1], id)
      end
      head = redis.call('ZRANGE', KEYS[k], 0, 0)[1] or ''
      if k == 4 and head ~= '' then
        pt = now + tonumber(ARGV[7])
        redis.call('HSET', h, 'p', head, 'pt', pt)
      end
    end
  end
  if head == '' and cur[6] then
    redis.call('HDEL', h, 'p', 'pt')
    pt = 0
  end
  -- A waiter whose attempt follows this release (ARGV[8], see pass.go)
  -- needs no notice.
  if head == '' or head ~= ARGV[8] then notify(ARGV[4], head) end
end
if not (live and cur[1] == ARGV[1] and (ARGV[2] ~= '' and cur[5] == ARGV[2] or cur[3] == ARGV[3])) then
  if not live and floor and cur[5] and tonumber(cur[5]) < floor then
    redis.call('HSET', h, 'f', ARGV[6])
  end
  if not live and (wasHead or (ARGV[5] ~= '' and cur[6] == ARGV[5])) then
    -- The waiter leaves while the lock is free here and was to go to it:
    -- it goes to the next one.
    handoff()
  end
  if not live then settle() end
  return {0}
end
local n = tonumber(cur[2]) - 1
if n > 0 then
  redis.call('HSET', h, 'n', n)
  return {1, n}
end
redis.call('HDEL', h, 'o', 'n', 'g', 'x')
if floor and (tonumber(cur[5]) or 0) < floor then
  redis.call('HSET', h, 'f', ARGV[6])
end
handoff()
settle()
return {1, 0}
`)

// releaseFast is the release script's common case, ahead of its
// definitions: the hold's last release with nobody queued but, in the fair
// queue, the releasing waiter itself, and nothing promised. Its outcome is
// the full script's (the waiter out of the fair queue, the fence key
// raised to the fence and the floor, the hash dropped) in EXISTS, HMGET,
// TIME, SET … GET and DEL, and ZCARD, EXISTS, ZSCORE and two ZREMs for a
// waiter in the fair queue. The full script takes the two queue counts
// from it. It sends no notice: a waiter that saw the lock
// held on this master joined one of its queues in the same script (see
// acquireScript), so with both queues empty no waiter needs to hear of
// this master. Anything else, or a fence key that does not hold a token
// (put back as it was, before any other write), falls through to the full
// script.
var releaseFast = `
local nfair, nwait = 0, 0
if redis.call('EXISTS', KEYS[2], KEYS[4]) > 0 then
  nfair, nwait = redis.call('ZCARD', KEYS[2]), redis.call('EXISTS', KEYS[4])
end
if nwait == 0 and (nfair == 0 or nfair == 1 and ARGV[5] ~= '') then
  local c = redis.call('HMGET', KEYS[1], 'o', 'n', 'g', 'x', 'f', 'p')
  if c[1] == ARGV[1] and c[2] == '1' and not c[6] and (ARGV[2] ~= '' and c[5] == ARGV[2] or c[3] == ARGV[3]) then
    local t = redis.call('TIME')
    if (tonumber(c[4]) or 0) > t[1] * 1000 + math.floor(t[2] / 1000) then
      -- A waiter in the fair queue releases fast only if it is alone there.
      if nfair == 0 or redis.call('ZSCORE', KEYS[2], ARGV[5]) then
        local v = math.max(tonumber(ARGV[6]) or 0, tonumber(c[5]) or 0)
        local old = redis.call('SET', KEYS[#KEYS], string.format('%.0f', v), 'KEEPTTL', 'GET')
        local hw = tonumber(old or '0')
        if ` + redisconn.TokenLua("hw") + ` then
          if hw > v then redis.call('SET', KEYS[#KEYS], old, 'KEEPTTL') end
          if nfair == 1 then
            redis.call('ZREM', KEYS[2], ARGV[5])
            redis.call('ZREM', KEYS[3], ARGV[5])
          end
          redis.call('DEL', KEYS[1])
          return {1, 0}
        end
        ` + restoreFenceLua + `
      end
    end
  end
end
`

// cancelScript withdraws a waiter from one master's queues and, if the
// lock is free and the waiter was the one a notice names (the head of the
// fair queue, or of the wait queue when there is no fair queue), tells the
// next one.
//
//	KEYS: lock hash, queue, deadlines, wait queue, its deadlines, fence key
//	ARGV: waiter id, channel, promise ms
//
// Replies 1 if it was queued, else 0. A promise of the lock to the waiter
// passes to the next head of the wait queue, or ends; a free lock whose
// promise ends loses its hash.
var cancelScript = newScript(notifySource + stateSource + `
if bad then return bad end
local cur = redis.call('HMGET', KEYS[1], 'o', 'x', 'p')
` + redisconn.HoldEndLua("KEYS[1]", "cur[1]", "cur[2]") + `local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local k = 2
if redis.call('EXISTS', KEYS[2]) == 0 then
  k = 4
end
local wasHead = redis.call('ZRANGE', KEYS[k], 0, 0)[1] == ARGV[1]
local r = 0
for j = 2, 5 do
  r = r + redis.call('ZREM', KEYS[j], ARGV[1])
end
if cur[3] == ARGV[1] then
  local next = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  local free = not cur[1] or (tonumber(cur[2]) or 0) <= now
  if next then
    redis.call('HSET', KEYS[1], 'p', next, 'pt', now + tonumber(ARGV[3]))
    keep(now, now + tonumber(ARGV[3]))
  elseif free then
    drop(tonumber(redis.call('HGET', h, 'f')))
  else
    redis.call('HDEL', KEYS[1], 'p', 'pt')
  end
end
if wasHead and (not cur[1] or (tonumber(cur[2]) or 0) <= now) then
  local next = ''
  for j = 2, 4, 2 do
    if next == '' then
      next = redis.call('ZRANGE', KEYS[j], 0, 0)[1] or ''
    end
  end
  notify(ARGV[2], next)
end
return math.min(r, 1)
`)
