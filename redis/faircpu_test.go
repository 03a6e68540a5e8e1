package redis

import (
	"context"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkFairScriptCPU measures the server CPU time per call of the
// scripts of a fair hand-off, as the Contended workload with Fair runs
// them: a waiter queues behind a holder (enqueue), the holder's release
// hands the lock to it (handoff), and the new holder releases with no
// queue left (release). The calls go in pipelines of 500, as in
// BenchmarkScriptCPU.
//
//	go test -run XXX -bench FairScriptCPU -benchtime 20x ./redis
func BenchmarkFairScriptCPU(b *testing.B) {
	srv := testserver.Redis(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, s := range []*script{acquireClockScript, releaseScript} {
		if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const names = 500
	keys := make([][]string, names)
	for i := range keys {
		k := newKeys("faircpu", strconv.Itoa(i))
		keys[i] = []string{k.lock(), k.queue(), k.timeouts(), k.fence()}
	}
	tag := "0123456789abcdef"
	ownerA, ownerB := "host/1234/"+tag+"aaaaaaaaaaaaaaaa", "host/1234/"+tag+"bbbbbbbbbbbbbbbb"
	run := func(s *script, args func(i int) []any) ([]*goredis.Cmd, float64) {
		t0 := serverCPU(b, c)
		p := c.Pipeline()
		cmds := make([]*goredis.Cmd, names)
		for i := range cmds {
			cmds[i] = p.EvalSha(ctx, s.hash, keys[i], args(i)...)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return cmds, serverCPU(b, c) - t0
	}
	var enq, hand, rel float64
	for round := range b.N + 1 {
		r := strconv.Itoa(round)
		ridA := func(i int) string { return tag + "-a" + r + "-" + strconv.Itoa(i) }
		ridB := func(i int) string { return "fedcba9876543210-b" + r + "-" + strconv.Itoa(i) }
		ga, _ := run(acquireClockScript, func(i int) []any { return []any{ownerA, 30000, ridA(i), modeFair, 10000} })
		qb, e := run(acquireClockScript, func(i int) []any { return []any{ownerB, 30000, ridB(i), modeFair, 10000} })
		if v, _ := qb[0].Val().([]any); len(v) == 0 || toInt(v[0]) != 0 {
			b.Fatalf("second acquire: %v, want queued", qb[0].Val())
		}
		hb, h := run(releaseScript, func(i int) []any {
			return []any{ownerA, toStr(ga[i].Val()), tag, ridB(i), ownerB, 30000}
		})
		v, _ := hb[0].Val().([]any)
		if len(v) < 4 || toStr(v[3]) == "" {
			b.Fatalf("release: %v, want a hand-off", hb[0].Val())
		}
		_, l := run(releaseScript, func(i int) []any {
			v, _ := hb[i].Val().([]any)
			return []any{ownerB, toStr(v[3]), tag}
		})
		if round > 0 {
			enq, hand, rel = enq+e, hand+h, rel+l
		}
	}
	n := float64(b.N * names)
	b.ReportMetric(enq/n, "enqueue-cpu-µs/call")
	b.ReportMetric(hand/n, "handoff-cpu-µs/call")
	b.ReportMetric(rel/n, "release-cpu-µs/call")
}
