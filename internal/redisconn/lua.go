package redisconn

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
