package bench

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkRedlock runs the dlocktest workloads on dlock's redlock backend
// (default and Fair) and on github.com/go-redsync/redsync/v4 with its
// defaults, in this process, against the same 5 independent redis-server
// masters: those listed (comma-separated) in REDLOCK_ADDRS, or 5 started
// for the run. Every sub-benchmark also reports cmds/grant: the commands
// the lockers sent to all masters plus the subscriptions the masters saw,
// per lock granted, and srv-µs/grant and cli-µs/grant: the CPU time of
// all masters (INFO cpu) and of this process per lock granted, as
// BenchmarkRedis reports them. dlock and dlock-fair also run the Herd workload, and
// dlock the Held workload (see [scale]), counting commands the same way.
//
//	cd bench && go test -run XXX -bench Redlock -benchtime 1000x
func BenchmarkRedlock(b *testing.B) {
	var addrs []string
	if env := os.Getenv("REDLOCK_ADDRS"); env != "" {
		addrs = strings.Split(env, ",")
	} else {
		addrs = testserver.RedisN(b, 5).Addrs()
	}
	var admins []*goredis.Client
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			b.Fatalf("redis at %s: %v", a, err)
		}
		admins = append(admins, c)
	}
	// Each locker stands for a process: it gets clients (connection pools)
	// of its own, one per master.
	newClients := func(b testing.TB, counter goredis.Hook, redlockOpts bool) []*goredis.Client {
		var cs []*goredis.Client
		for _, a := range addrs {
			o := &goredis.Options{Addr: a}
			if redlockOpts {
				// As redlock.Open makes them.
				o.ContextTimeoutEnabled, o.MaxRetries = true, -1
			}
			c := goredis.NewClient(o)
			c.AddHook(counter)
			b.Cleanup(func() { c.Close() })
			cs = append(cs, c)
		}
		return cs
	}
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"dlock", nil}, {"dlock-fair", []dlock.Option{dlock.Fair()}}} {
		b.Run(mode.name, func(b *testing.B) {
			dlocktest.BenchLockers(b, countingN(admins, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
				be, err := redlock.New(newClients(b, counter, true))
				if err != nil {
					b.Fatal(err)
				}
				c, err := dlock.New(be, mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close(); be.Close() })
				return dlockLocker{c}
			}))
			var cmds atomic.Int64
			scale(b, mode.name == "dlock", mode.opts, func(t testing.TB) dlock.Backend {
				be, err := redlock.New(newClients(t, cmdCounter{&cmds}, true))
				if err != nil {
					t.Fatal(err)
				}
				return be
			}, func() int64 {
				n := cmds.Load()
				for _, a := range admins {
					n += subscriptions(b, a)
				}
				return n
			})
		})
	}
	b.Run("redsync", func(b *testing.B) {
		dlocktest.BenchLockers(b, countingN(admins, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
			var pools []redsyncredis.Pool
			for _, c := range newClients(b, counter, false) {
				pools = append(pools, redsyncgoredis.NewPool(c))
			}
			return redsyncLocker{redsync.New(pools...)}
		}))
	})
}

// countingN is counting (see BenchmarkRedis) over several masters.
func countingN(admins []*goredis.Client, newLocker func(*testing.B, goredis.Hook) dlocktest.Locker) func(*testing.B) dlocktest.Locker {
	type state struct {
		subsBefore int64
		srvBefore  float64
		cliBefore  float64
		cmds       atomic.Int64
		grants     atomic.Int64
	}
	srv := func(b testing.TB) float64 {
		var t float64
		for _, a := range admins {
			t += serverCPU(b, a)
		}
		return t
	}
	subs := func(b testing.TB) int64 {
		var n int64
		for _, a := range admins {
			n += subscriptions(b, a)
		}
		return n
	}
	states := make(map[*testing.B]*state)
	return func(b *testing.B) dlocktest.Locker {
		st := states[b]
		if st == nil {
			st = &state{subsBefore: subs(b), srvBefore: srv(b), cliBefore: processCPU()}
			states[b] = st
			b.Cleanup(func() {
				delete(states, b)
				if g := st.grants.Load(); g > 0 {
					n := st.cmds.Load() + subs(b) - st.subsBefore
					b.ReportMetric(float64(n)/float64(g), "cmds/grant")
					b.ReportMetric((srv(b)-st.srvBefore)/float64(g), "srv-µs/grant")
					b.ReportMetric((processCPU()-st.cliBefore)/float64(g), "cli-µs/grant")
				}
			})
		}
		return countingLocker{newLocker(b, cmdCounter{&st.cmds}), &st.grants}
	}
}
