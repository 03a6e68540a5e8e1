package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkRedis runs the dlocktest workloads on dlock's redis backend
// (default and Fair) and on github.com/go-redsync/redsync/v4 and
// github.com/bsm/redislock with their defaults, in this process, against
// one redis-server: the one at REDIS_ADDR, or one started for the run.
//
// Besides the workloads' own metrics, every sub-benchmark reports, per
// lock granted: cmds/grant, the Redis commands the server executed
// (connection set-up and INFO itself left out); srv-µs/grant, the server's
// CPU time (INFO cpu, user and system); and cli-µs/grant, this process's
// CPU time (getrusage), which includes the benchmark's own bookkeeping.
//
// dlock and dlock-fair also run the Herd workload, and dlock the Held
// workload (see [scale]) and the weighted kinds' (Semaphore4x16, RW90: see
// [weighted]; no Go peer on Redis has them); their store-req counts are
// the commands sent, as above.
//
//	cd bench && go test -run XXX -bench Redis -benchtime 2000x
func BenchmarkRedis(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = testserver.Redis(b).Addr()
	}
	admin, newClient := redisClients(b, addr)

	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"dlock", nil}, {"dlock-fair", []dlock.Option{dlock.Fair()}}} {
		b.Run(mode.name, func(b *testing.B) {
			dlocktest.BenchLockers(b, counting(admin, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
				be, err := dredis.New(newClient(b, counter))
				if err != nil {
					b.Fatal(err)
				}
				c, err := dlock.New(be, mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return dlockLocker{c}
			}))
			var cmds atomic.Int64
			newBackend := func(t testing.TB) dlock.Backend {
				be, err := dredis.New(newClient(t, cmdCounter{&cmds}))
				if err != nil {
					t.Fatal(err)
				}
				return be
			}
			store := func() int64 { return cmds.Load() + subscriptions(b, admin) }
			scale(b, mode.name == "dlock", mode.opts, newBackend, store)
			if mode.name == "dlock" { // weighted waiters queue in order with or without Fair
				weighted(b, newBackend, store)
			}
		})
	}
	b.Run("redsync", func(b *testing.B) {
		dlocktest.BenchLockers(b, counting(admin, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
			return redsyncLocker{redsync.New(redsyncgoredis.NewPool(newClient(b, counter)))}
		}))
	})
	b.Run("redislock", func(b *testing.B) {
		dlocktest.BenchLockers(b, counting(admin, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
			return redislockLocker{redislock.New(newClient(b, counter))}
		}))
	})
	b.Run("floor", func(b *testing.B) { roundTripFloor(b, admin, newClient(b, cmdCounter{new(atomic.Int64)})) })
}

// roundTripFloor is what any lock that takes one round trip to lock and
// one to unlock cannot beat on this machine: two EVALSHA of a script that
// does nothing (one key, one argument) per "grant", through go-redis, in
// the Uncontended (one goroutine, ns/op) and DistinctNames (32 goroutines,
// ops/s) shapes of the workloads above. It locks nothing. Like the
// lockers, it reports srv-µs/grant and cli-µs/grant (the CPU time of the
// server and of this process per pair), which compare better than times
// on a busy machine, and Uncontended its p50-µs and p99-µs.
func roundTripFloor(b *testing.B, admin, c *goredis.Client) {
	ctx := context.Background()
	nop := goredis.NewScript(`return 1`)
	if err := nop.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	op := func(key string) {
		for range 2 {
			if err := c.EvalSha(ctx, nop.Hash(), []string{key}, "0123456789abcdef0123456789abcdef").Err(); err != nil {
				b.Error(err)
				return
			}
		}
	}
	cpu := func(b *testing.B) {
		srv0, cli0 := serverCPU(b, admin), processCPU()
		b.Cleanup(func() {
			b.ReportMetric((serverCPU(b, admin)-srv0)/float64(b.N), "srv-µs/grant")
			b.ReportMetric((processCPU()-cli0)/float64(b.N), "cli-µs/grant")
		})
	}
	b.Run("Uncontended", func(b *testing.B) {
		cpu(b)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			op("floor")
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
	})
	b.Run("DistinctNames", func(b *testing.B) {
		cpu(b)
		const goroutines = 32
		var left atomic.Int64
		left.Store(int64(b.N))
		var wg sync.WaitGroup
		start := time.Now()
		for g := range goroutines {
			wg.Go(func() {
				key := "floor/" + strconv.Itoa(g)
				for left.Add(-1) >= 0 {
					op(key)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	})
}

type dlockLocker struct{ c *dlock.Client }

func (l dlockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// redsyncLocker is redsync with its defaults (expiry 8s, 32 tries 50-250ms
// apart). Its Lock gives up after the tries; the adapter calls it again, as
// a caller that must have the lock would.
type redsyncLocker struct{ rs *redsync.Redsync }

func (l redsyncLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	for {
		m := l.rs.NewMutex(name)
		err := m.LockContext(ctx)
		if err == nil {
			return func(ctx context.Context) error {
				_, err := m.UnlockContext(ctx)
				return err
			}, nil
		}
		var taken *redsync.ErrTaken
		if ctx.Err() != nil || !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			return nil, err
		}
	}
}

// redislockLocker is bsm/redislock. Its default is not to retry, so the
// adapter asks for its linear backoff of 100ms (its documented retrying
// form) and calls Obtain again after Obtain's own deadline (the TTL).
type redislockLocker struct{ c *redislock.Client }

const redislockTTL = 30 * time.Second // dlock's default TTL

func (l redislockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	for {
		lk, err := l.c.Obtain(ctx, name, redislockTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)})
		if err == nil {
			return lk.Release, nil
		}
		if ctx.Err() != nil || !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
	}
}

// counting wraps a locker factory so that each sub-benchmark reports the
// Redis commands per grant: the commands the lockers' clients sent (counted
// by a go-redis hook; connection set-up left out) plus the pub/sub
// subscriptions the server saw, which do not pass the hooks.
func counting(admin *goredis.Client, newLocker func(*testing.B, goredis.Hook) dlocktest.Locker) func(*testing.B) dlocktest.Locker {
	type state struct {
		subsBefore int64
		srvBefore  float64
		cliBefore  float64
		cmds       atomic.Int64
		grants     atomic.Int64
	}
	states := make(map[*testing.B]*state)
	return func(b *testing.B) dlocktest.Locker {
		st := states[b]
		if st == nil {
			st = &state{subsBefore: subscriptions(b, admin), srvBefore: serverCPU(b, admin), cliBefore: processCPU()}
			states[b] = st
			b.Cleanup(func() {
				delete(states, b)
				if g := st.grants.Load(); g > 0 {
					n := st.cmds.Load() + subscriptions(b, admin) - st.subsBefore
					b.ReportMetric(float64(n)/float64(g), "cmds/grant")
					b.ReportMetric((serverCPU(b, admin)-st.srvBefore)/float64(g), "srv-µs/grant")
					b.ReportMetric((processCPU()-st.cliBefore)/float64(g), "cli-µs/grant")
				}
			})
		}
		return countingLocker{newLocker(b, cmdCounter{&st.cmds}), &st.grants}
	}
}

type countingLocker struct {
	dlocktest.Locker
	grants *atomic.Int64
}

func (l countingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, err := l.Locker.Lock(ctx, name)
	if err == nil {
		l.grants.Add(1)
	}
	return unlock, err
}

// cmdCounter is a go-redis hook that counts the commands a client sends.
type cmdCounter struct{ n *atomic.Int64 }

func (h cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !setup(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			if !setup(cmd) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func setup(cmd goredis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// serverCPU returns the CPU time the server has used, in µs (INFO cpu).
func serverCPU(b testing.TB, admin *goredis.Client) float64 {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	return testserver.RedisCPU(info)
}

// processCPU returns the CPU time this process has used, in µs.
func processCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// subscriptions sums the server's SUBSCRIBE and UNSUBSCRIBE calls (INFO
// commandstats).
func subscriptions(b testing.TB, admin *goredis.Client) int64 {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe":
			calls, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(calls, 10, 64)
			n += v
		}
	}
	return n
}

// BenchmarkRedisTokens runs dlock's redis backend with its default clock
// tokens (dlock) and with the ClockTokens(false) opt-out (dlock-counter),
// and the round-trip floor, against one redis-server, for the cost of the
// safe token default; -count interleaves the three:
//
//	cd bench && go test -run XXX -bench 'RedisTokens/.*/Uncontended$' -benchtime 5000x -count 5
func BenchmarkRedisTokens(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = testserver.Redis(b).Addr()
	}
	admin, newClient := redisClients(b, addr)
	for _, mode := range []struct {
		name string
		opts []dredis.Option
	}{{"dlock", nil}, {"dlock-counter", []dredis.Option{dredis.ClockTokens(false)}}} {
		b.Run(mode.name, func(b *testing.B) {
			dlocktest.BenchLockers(b, counting(admin, func(b *testing.B, counter goredis.Hook) dlocktest.Locker {
				be, err := dredis.New(newClient(b, counter), mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				c, err := dlock.New(be)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return dlockLocker{c}
			}))
		})
	}
	b.Run("floor", func(b *testing.B) { roundTripFloor(b, admin, newClient(b, cmdCounter{new(atomic.Int64)})) })
}

// redisClients returns an admin client of the redis at addr, closed at the
// end of b, and newClient, which gives each locker a client (a connection
// pool) of its own, as a process would have, with counter hooked.
func redisClients(b *testing.B, addr string) (admin *goredis.Client, newClient func(testing.TB, goredis.Hook) *goredis.Client) {
	admin = goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() { admin.Close() })
	if err := admin.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("redis at %s: %v", addr, err)
	}
	return admin, func(t testing.TB, counter goredis.Hook) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		c.AddHook(counter)
		t.Cleanup(func() { c.Close() })
		return c
	}
}
