package dlocktest

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/workload"
)

// BenchOption adjusts the scale workloads of [Bench], [BenchHeld] and
// [BenchHerd].
type BenchOption interface{ applyBench(*workload.Config) }

type benchOptionFunc func(*workload.Config)

func (f benchOptionFunc) applyBench(c *workload.Config) { f(c) }

func newBenchConfig(opts []BenchOption) workload.Config {
	c := workload.DefaultConfig()
	for _, o := range opts {
		o.applyBench(&c)
	}
	return c
}

// HeldSizes sets the numbers of leases the Held workload holds at once,
// one sub-benchmark each; the default is 10,000 and 100,000.
func HeldSizes(n ...int) BenchOption {
	return benchOptionFunc(func(c *workload.Config) { c.Held = n })
}

// HeldTTL sets the TTL of the Held workload's leases (default: 3 s per
// 10,000 leases, so 3 s for 10,000 and 30 s for 100,000; or the Go
// duration in the environment variable DLOCK_BENCH_HELD_TTL). The leases
// are held for four renewal periods (4·TTL/3) once all are taken. A d of
// 0 or less keeps the default.
//
// The default keeps the renewals asked of the store at about 10,000 a
// second (n leases, each renewed every TTL/3) whatever n: Held measures
// what a Client keeps and sends per lease, not how many renewals a second
// the server can carry. 100,000 leases of 3 s ask for 100,000 renewals a
// second, more than a Redis server on a busy 2-core machine executes
// while it also grants the leases being taken.
func HeldTTL(d time.Duration) BenchOption {
	return benchOptionFunc(func(c *workload.Config) {
		if d > 0 {
			c.HeldTTL = d
		}
	})
}

// HeldBudget bounds the time the Held workload spends taking its leases
// (default 3 minutes, or the Go duration in the environment variable
// DLOCK_BENCH_HELD_BUDGET); a size that takes longer is skipped, with the
// rate it reached, rather than measured.
func HeldBudget(d time.Duration) BenchOption {
	return benchOptionFunc(func(c *workload.Config) { c.HeldBudget = d })
}

// HerdSizes sets the numbers of waiters of the Herd workload, one
// sub-benchmark each; the default is 10, 100 and 1,000.
func HerdSizes(n ...int) BenchOption {
	return benchOptionFunc(func(c *workload.Config) { c.Herd = n })
}

// HerdClients sets how many Clients (each with a backend of its own) share
// the Herd workload's waiters; the default is 10.
func HerdClients(n int) BenchOption {
	return benchOptionFunc(func(c *workload.Config) { c.HerdClients = n })
}

// StoreRequests gives the scale and weighted workloads a count of the
// requests that reached the store so far (commands, statements, RPCs:
// counted by the caller in its driver, for every backend the factory
// makes); they then report it beside their own count of backend calls.
func StoreRequests(count func() int64) BenchOption {
	return benchOptionFunc(func(c *workload.Config) { c.Requests = count })
}

// BenchHeld runs the Held workload for each size n (see [HeldSizes]): one
// Client takes n leases on distinct names (64 Locks at a time), holds
// them for four renewal periods, and releases them. It reports
//
//   - B/lease: the heap in use after a GC while holding, less that before
//     the Client was made, per lease (the Client's, its backend's and this
//     workload's few bytes per lease); marginal-B/lease: the same for
//     the last nine tenths of the leases only (the heap while holding,
//     less that once a tenth were taken, per lease taken since), which
//     leaves out what the Client and its connections cost whatever the
//     number of leases (go-redis's and gRPC's buffers: 140-340 B a lease
//     at 10,000);
//   - goroutines-before and goroutines: the process's goroutines before
//     the Client was made and the most seen while holding;
//   - renew-calls/s and renew-items/s: renewal calls (Renew, RenewBatch)
//     and the leases they carried, per second of holding, counted at the
//     backend boundary; renewals/lease, the renewals per lease while held;
//   - store-req/s: the requests the store saw per second of holding, when
//     [StoreRequests] is given;
//   - lost: the leases that ended before their release (the goal is
//     none), and lost-taking, those of them that ended while the others
//     were being taken;
//   - acquire-s: the seconds taking the leases took (a Lock that fails
//     with ErrBackendUnavailable is retried up to 3 times: lock-retries);
//     renew-errs, the
//     renewals that failed, and renew-max-s, the longest renewal call.
//
// Run it once per size: -benchtime 1x. It ignores b.N.
func BenchHeld(b *testing.B, newBackend Factory, opts ...BenchOption) {
	cfg := newBenchConfig(opts)
	for _, n := range cfg.Held {
		b.Run(strconv.Itoa(n), func(b *testing.B) { report(b)(workload.Held(backendOf(b, newBackend), cfg, n)) })
	}
}

// BenchHerd runs the Herd workload for each number of waiters w (see
// [HerdSizes]), with the Client options opts (Fair or not): w goroutines,
// spread over several Clients (see [HerdClients]), lock one name in a loop:
// lock, unlock, and, once a waiter has the lock, lock again; so at every
// release w-1 wait, and every grant is a hand-off to a waiter. The first
// release comes once all w are registered with the store, and b.N grants
// are measured. It reports
//
//   - calls/release: backend calls (Acquire, Waiter.Acquire, Release,
//     Cancel, renewals) per release, the releaser's own next Acquire
//     included; the goal is O(1), not O(w);
//   - wakes/release: Waiter.Wait returns per release;
//   - store-req/release: the requests the store saw per release, when
//     [StoreRequests] is given;
//   - handoff-p50-µs and handoff-p99-µs: from the start of a release to
//     the next grant.
func BenchHerd(b *testing.B, newBackend Factory, opts []dlock.Option, bopts ...BenchOption) {
	cfg := newBenchConfig(bopts)
	for _, w := range cfg.Herd {
		b.Run(strconv.Itoa(w), func(b *testing.B) {
			report(b)(workload.Herd(backendOf(b, newBackend), opts, cfg, w, workload.OpsSpan(b.N, b.ResetTimer)))
		})
	}
}

// backendOf adapts a Factory to the scale workloads, on b.
func backendOf(b *testing.B, f Factory) workload.BackendFunc {
	return func() (dlock.Backend, error) { return f(b), nil }
}
