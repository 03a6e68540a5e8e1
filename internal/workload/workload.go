// Package workload runs the benchmark workloads of dlock (uncontended,
// distinct names, contended, herd, held) without the testing package, so
// that the dlock command can run them (dlock bench) without linking
// testing. Package dlocktest's Bench functions run the same workloads
// under testing.B.
package workload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// Locker is the least a lock library must offer to run the workloads: a
// blocking lock by name that returns its unlock.
type Locker interface {
	Lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
}

// ClientLocker is a Locker that locks c's Mutexes.
func ClientLocker(c *dlock.Client) Locker { return clientLocker{c} }

type clientLocker struct{ c *dlock.Client }

func (l clientLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// ContendedWork is the work each contender of the Contended workloads does
// while it holds the lock.
const ContendedWork = 100 * time.Microsecond

// Config sets the sizes of the scale workloads, Held and Herd.
type Config struct {
	Held        []int         // numbers of leases Held holds at once
	HeldTTL     time.Duration // TTL of Held's leases; 0: HeldTTLFor's default by size
	HeldBudget  time.Duration // the most Held spends taking its leases
	Herd        []int         // numbers of waiters of Herd
	HerdClients int           // Clients that share Herd's waiters
	// Requests, if set, returns the requests the store has served so far;
	// the scale workloads then report them.
	Requests func() int64
}

// DefaultConfig is the Config of dlocktest.Bench: Held 10,000 and 100,000
// leases within 3 minutes, Herd 10, 100 and 1,000 waiters over 10
// Clients; the Go durations in the environment variables
// DLOCK_BENCH_HELD_TTL and DLOCK_BENCH_HELD_BUDGET, when set, give
// HeldTTL and HeldBudget.
func DefaultConfig() Config {
	c := Config{
		Held:        []int{10_000, 100_000},
		HeldBudget:  3 * time.Minute,
		Herd:        []int{10, 100, 1000},
		HerdClients: 10,
	}
	if ttl, err := time.ParseDuration(os.Getenv("DLOCK_BENCH_HELD_TTL")); err == nil && ttl > 0 {
		c.HeldTTL = ttl
	}
	if d, err := time.ParseDuration(os.Getenv("DLOCK_BENCH_HELD_BUDGET")); err == nil && d > 0 {
		c.HeldBudget = d
	}
	return c
}

// HeldTTLFor returns the TTL of the Held workload of n leases: HeldTTL,
// or else 3 s per 10,000 leases (see dlocktest.HeldTTL for why).
func (c Config) HeldTTLFor(n int) time.Duration {
	if c.HeldTTL > 0 {
		return c.HeldTTL
	}
	return 3 * time.Second * time.Duration(max(1, n/10_000))
}

// BackendFunc makes the backend of one more Client of a scale workload.
type BackendFunc func() (dlock.Backend, error)

// ErrTooSlow says that a workload could not set itself up within its
// budget: a benchmark skips it rather than measure it.
var ErrTooSlow = errors.New("too slow for this size, skipped")

func storeCount(cfg Config) int64 {
	if cfg.Requests == nil {
		return 0
	}
	return cfg.Requests()
}

// namePrefix returns a fresh prefix for a run's lock names, so that runs
// on one store never meet.
func namePrefix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "dlockbench/" + hex.EncodeToString(b) + "/"
}

// heapInUse returns the bytes in in-use heap spans after a GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// parallel calls f(i) for every i in [0, n), 64 at a time.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, 64) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				f(int(i))
			}
		})
	}
	wg.Wait()
}
