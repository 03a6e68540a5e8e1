package redisconn

import "strconv"

// HoldCheckLua is Lua, for the scripts of the packages redis and redlock,
// that returns foreign(why) from the script when the fields of a lock hash
// read into the Lua expressions o (owner), n (reentry count) and x (lease
// end) are not what dlock writes: a hold whose count is not a positive
// integer or whose end is not a number, or a count without an owner. The
// script defines foreign(why), which makes the error reply.
func HoldCheckLua(o, n, x string) string {
	return `if ` + o + ` then
  local n = tonumber(` + n + `)
  if not n or n < 1 or n % 1 ~= 0 then return foreign('count n of a hold is not a positive integer') end
  if not tonumber(` + x + `) then return foreign('expiry x of a hold is not a number') end
elseif ` + n + ` then
  return foreign('count n without an owner o')
end
`
}

// MaxToken is the largest fencing token of the packages redis and redlock:
// their scripts compute in Lua numbers, which are doubles, exact up to
// 2^53.
const MaxToken = 1<<53 - 1

var maxTokenLua = strconv.FormatInt(MaxToken, 10)

// TokenLua is a Lua condition that holds when the Lua value n (a number,
// or nil or false) is a fencing token: an integer from 0 below MaxToken.
func TokenLua(n string) string {
	return `(` + n + ` and ` + n + ` >= 0 and ` + n + ` % 1 == 0 and ` + n + ` < ` + maxTokenLua + `)`
}

// FenceErrorLua is a Lua expression: the error reply for the fence key fk
// (a Lua expression) that does not hold a token.
func FenceErrorLua(fk string) string {
	return `redis.error_reply('DLOCKFOREIGN fence key ' .. ` + fk + ` .. ' does not hold a token (a non-negative integer below ` + maxTokenLua + `)')`
}

// HoldEndLua is a Lua statement, for the redlock scripts, that sets the
// Lua variable x (a field read from a lock hash h) to the end of the hold,
// the server's time in ms, when the hash has an owner (the Lua expression
// o) but no x and an expiry: the redis backend's common path writes such
// holds, whose lease ends with the hash. Both backends keep a name in the
// same hash on one server, so a redlock script must see such a hold as
// live until the hash expires, never as free (which would let it take or
// delete the redis holder's lock).
func HoldEndLua(h, o, x string) string {
	return `if ` + o + ` and not ` + x + ` then
  local p = redis.call('PTTL', ` + h + `)
  if p > 0 then
    local t0 = redis.call('TIME')
    ` + x + ` = string.format('%.0f', t0[1] * 1000 + math.floor(t0[2] / 1000) + p)
  end
end
`
}
