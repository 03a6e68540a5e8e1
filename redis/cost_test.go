package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkServerCost measures what the uncontended acquire and release
// scripts cost the server: the time Redis reports spending in them (INFO
// commandstats, usec_per_call of EVALSHA), per call. It is elapsed time, so
// on a loaded machine it includes the server's waits for a CPU: compare
// with the figures for bsm/redislock's scripts from the same run. Each of b.N names is
// acquired once beforehand, so the lock's data exists (as for a lock in
// use); then all b.N are acquired, then all released, each phase with the
// server's statistics reset.
//
//	go test -run XXX -bench ServerCost -benchtime 20000x ./redis
func BenchmarkServerCost(b *testing.B) {
	srv := testserver.Redis(b)
	admin := newClient(b, srv.Addr())
	be := newBackend(b, srv.Addr())
	ctx := context.Background()
	names := make([]string, b.N)
	for i := range names {
		names[i] = fmt.Sprintf("cost/%d", i)
	}
	ttl := 30 * time.Second
	phase := func(f func(i int) error) float64 {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for i := range names {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
		return cmdStat(b, admin, "evalsha", "usec_per_call")
	}
	holds := make([]dlock.Hold, b.N)
	acquire := func(i int) error {
		g, _, err := be.Acquire(ctx, dlock.Request{Name: names[i], Owner: "o", TTL: ttl})
		holds[i] = dlock.Hold{Name: names[i], Owner: "o", Token: g.Token, Handle: g.Handle}
		return err
	}
	release := func(i int) error { return be.Release(ctx, holds[i]) }
	phase(acquire)
	phase(release)
	b.ResetTimer()
	acq := phase(acquire)
	rel := phase(release)
	// The same for bsm/redislock's scripts (v0.9.4), as a yardstick
	// measured under the same load.
	obtain := goredis.NewScript(dredis.RedislockObtain)
	free := goredis.NewScript(dredis.RedislockRelease)
	value := "0123456789abcdef0123456789abcdef"
	pobtain := func(i int) error {
		return obtain.Run(ctx, admin, []string{names[i]}, value, 22, 30000).Err()
	}
	prelease := func(i int) error { return free.Run(ctx, admin, []string{names[i]}, value).Err() }
	phase(pobtain)
	phase(prelease)
	pacq := phase(pobtain)
	prel := phase(prelease)
	b.ReportMetric(acq, "acquire-µs/call")
	b.ReportMetric(rel, "release-µs/call")
	b.ReportMetric(pacq, "redislock-obtain-µs/call")
	b.ReportMetric(prel, "redislock-release-µs/call")
}
