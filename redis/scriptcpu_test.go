package redis

import (
	"context"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkScriptCPU measures the server CPU time (INFO cpu, user and
// system) per call of the acquire and release scripts on the common path (a
// lock in use, free, no queue; the acquire script also with ClockTokens),
// and of bsm/redislock's scripts (v0.9.4) as a yardstick, and of a script
// that does nothing (see the baselines below). The calls go in
// pipelines of 500, so that the server's network and event-loop work is
// shared out and the figures are mostly the scripts' own; CPU time, unlike BenchmarkServerCost's usec_per_call, does
// not count the time the server waits for a CPU on a busy machine.
//
//	go test -run XXX -bench ScriptCPU -benchtime 20x ./redis
func BenchmarkScriptCPU(b *testing.B) {
	srv := testserver.Redis(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { c.Close() })
	owner := "host/1234/0123456789abcdef0123456789abcdef"
	acq, rel := scriptCPU(b, c, "dlock", acquireScript.src, releaseScript.src, 4,
		func(i int) []any { return []any{owner, 30000, "0123456789abcdef-" + strconv.Itoa(i), modeWait, 10000} },
		func(v any) []any { return []any{owner, toStr(v), "0123456789abcdef"} })
	clockAcq, _ := scriptCPU(b, c, "dlock-clock", acquireClockScript.src, releaseScript.src, 4,
		func(i int) []any { return []any{owner, 30000, "0123456789abcdef-" + strconv.Itoa(i), modeWait, 10000} },
		func(v any) []any { return []any{owner, toStr(v), "0123456789abcdef"} })
	value := "0123456789abcdef0123456789abcdef"
	pacq, prel := scriptCPU(b, c, "redislock", RedislockObtain, RedislockRelease, 1,
		func(int) []any { return []any{value, 22, 30000} },
		func(any) []any { return []any{value} })
	// Baselines: a script that does nothing, called as the bench module's
	// floor calls it (one key, one argument) and with the acquire and
	// release scripts' keys and arguments. The first is the floor's server
	// cost per call; the gap to the second is what the arguments cost, and
	// the gap from the second to the scripts is their commands' work.
	nop := "return 1"
	floorAcq, floorRel := scriptCPU(b, c, "nop-floor", nop, nop, 1,
		func(int) []any { return []any{value} },
		func(any) []any { return []any{value} })
	argsAcq, argsRel := scriptCPU(b, c, "nop-args", nop, nop, 4,
		func(i int) []any { return []any{owner, 30000, "0123456789abcdef-" + strconv.Itoa(i), modeWait, 10000} },
		func(any) []any { return []any{owner, "1764300000000000", "0123456789abcdef"} })
	b.ReportMetric(acq, "acquire-cpu-µs/call")
	b.ReportMetric(rel, "release-cpu-µs/call")
	b.ReportMetric(clockAcq, "acquire-clock-cpu-µs/call")
	b.ReportMetric(pacq, "redislock-obtain-cpu-µs/call")
	b.ReportMetric(prel, "redislock-release-cpu-µs/call")
	b.ReportMetric((floorAcq+floorRel)/2, "nop-floor-cpu-µs/call")
	b.ReportMetric((argsAcq+argsRel)/2, "nop-dlock-args-cpu-µs/call")
}

// RedislockObtain and RedislockRelease are bsm/redislock's scripts
// (v0.9.4), the yardstick of the benchmarks of the scripts' cost (ARGV:
// value, value length to compare, ttl ms; and value).
const (
	RedislockObtain = `
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end
local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`
	RedislockRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
)

// scriptCPU runs b.N rounds of: acquire on 500 names in one pipeline, then
// release them in another, and returns the server CPU µs per call of
// each. A first round, not counted, creates the names' data.
func scriptCPU(b *testing.B, c *goredis.Client, prefix, acqSrc, relSrc string, nkeys int,
	acqArgs func(i int) []any, relArgs func(grant any) []any) (float64, float64) {
	ctx := context.Background()
	acq, rel := goredis.NewScript(acqSrc), goredis.NewScript(relSrc)
	for _, s := range []*goredis.Script{acq, rel} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const names = 500
	keys := make([][]string, names)
	for i := range keys {
		k := newKeys("cpu-"+prefix, strconv.Itoa(i))
		keys[i] = []string{k.lock(), k.queue(), k.timeouts(), k.fence()}[:nkeys]
	}
	run := func(s *goredis.Script, args func(i int) []any) []*goredis.Cmd {
		p := c.Pipeline()
		cmds := make([]*goredis.Cmd, names)
		for i := range cmds {
			cmds[i] = p.EvalSha(ctx, s.Hash(), keys[i], args(i)...)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return cmds
	}
	var acqCPU, relCPU float64
	for round := range b.N + 1 {
		t0 := serverCPU(b, c)
		grants := run(acq, acqArgs)
		t1 := serverCPU(b, c)
		run(rel, func(i int) []any { return relArgs(grants[i].Val()) })
		t2 := serverCPU(b, c)
		if round > 0 {
			acqCPU += t1 - t0
			relCPU += t2 - t1
		}
	}
	return acqCPU / float64(b.N*names), relCPU / float64(b.N*names)
}

// serverCPU returns the CPU time the server has used, in µs.
func serverCPU(b *testing.B, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testserver.RedisCPU(info)
}
