package dlocktest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/workload"
)

// Locker is the least a lock library must offer to run the benchmark
// workloads: a blocking lock by name that returns its unlock. [Bench] runs
// the workloads on dlock; adapt another library to Locker to run the very
// same workloads on it, in the same process, with [BenchLockers].
type Locker interface {
	Lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
}

// Bench runs the standard workloads on dlock clients over backends made by
// newBackend, without and with [dlock.Fair]:
//
//   - Uncontended: one goroutine locks and unlocks one name; p50 and p99
//     latency of the pair.
//   - DistinctNames: 32 goroutines, each on its own name; ops/s.
//   - Contended (8) and Contended64: goroutines, each with its own client (its own
//     connection), on one name, each doing [ContendedWork] while it
//     holds the lock; grants/s, owner changes/s (grants to
//     another goroutine than the one that released last), a waiter's wait
//     p50/p99, the hand-off latency p50/p99 from a release to the next
//     holder's grant, and Jain's fairness index over the goroutines' grants.
//   - Herd: many waiters on one name across several Clients ([BenchHerd]).
//
// and, once, the weighted kinds' workloads ([BenchWeighted]): a semaphore
// of 4 with 16 contenders (Semaphore4x16) and a read-write lock with 90%
// readers among 16 contenders (RW90), skipped on a backend that cannot
// keep them; leadership handed over between two candidates of an
// election ([BenchElections]); and Held: many leases held at once by one Client
// ([BenchHeld]).
// Held ignores b.N; select it on its own with -benchtime 1x. bopts set the
// sizes of Held and Herd.
func Bench(b *testing.B, newBackend Factory, bopts ...BenchOption) {
	for _, fair := range []bool{false, true} {
		name := "Default"
		var opts []dlock.Option
		if fair {
			name = "Fair"
			opts = append(opts, dlock.Fair())
		}
		b.Run(name, func(b *testing.B) {
			BenchLockers(b, func(b *testing.B) Locker {
				c, err := dlock.New(newBackend(b), opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return workload.ClientLocker(c)
			})
			b.Run("Herd", func(b *testing.B) { BenchHerd(b, newBackend, opts, bopts...) })
		})
	}
	BenchWeighted(b, newBackend, bopts...)
	BenchElections(b, newBackend, bopts...)
	b.Run("Held", func(b *testing.B) { BenchHeld(b, newBackend, bopts...) })
}

// ContendedWork is the work each contender of the Contended workloads does
// while it holds the lock.
const ContendedWork = workload.ContendedWork

// BenchLockers runs the workloads of [Bench] on lockers made by newLocker;
// each call stands for a separate process with its own connection.
// Contended runs 8 contenders, Contended64 64.
func BenchLockers(b *testing.B, newLocker func(b *testing.B) Locker) {
	benchLockers(b, newLocker, 0)
}

// BenchLockersFor is [BenchLockers] with the Contended workloads measured
// for the time d instead of b.N grants (they then ignore b.N): for a
// library whose hand-off waits out a poll of seconds, where b.N grants,
// sized by the framework from the first uncontended grant, could take
// hours.
func BenchLockersFor(b *testing.B, newLocker func(b *testing.B) Locker, d time.Duration) {
	benchLockers(b, newLocker, d)
}

// benchLockers is BenchLockers, with the Contended workloads measured for
// d if it is positive.
func benchLockers(b *testing.B, newLocker func(b *testing.B) Locker, d time.Duration) {
	prefix := "dlockbench/" + randHex(6) + "/"
	ctx := context.Background()
	b.Run("Uncontended", func(b *testing.B) {
		l := newLocker(b)
		report(b)(workload.Uncontended(ctx, l, prefix+"u", workload.OpsSpan(b.N, b.ResetTimer)))
	})
	b.Run("DistinctNames", func(b *testing.B) {
		l := newLocker(b)
		report(b)(workload.Distinct(ctx, l, prefix+"d/", 32, workload.OpsSpan(b.N, b.ResetTimer)))
	})
	for _, n := range []int{8, 64} {
		name := "Contended"
		if n != 8 {
			name += strconv.Itoa(n)
		}
		b.Run(name, func(b *testing.B) {
			lockers := make([]workload.Locker, n)
			for i := range lockers {
				lockers[i] = newLocker(b)
			}
			sp := workload.OpsSpan(b.N, b.ResetTimer)
			if d > 0 {
				sp = workload.TimeSpan(d, b.ResetTimer)
			}
			report(b)(workload.Contended(ctx, lockers, prefix+name, ContendedWork, sp))
		})
	}
}

// report returns a function that reports r's metrics on b, or fails b
// with err.
func report(b *testing.B) func(r workload.Result, err error) {
	return func(r workload.Result, err error) {
		b.StopTimer()
		switch {
		case errors.Is(err, workload.ErrTooSlow), errors.Is(err, errors.ErrUnsupported):
			b.Skip(err) // too slow for its size, or a kind the backend cannot keep
		case err != nil:
			b.Fatal(err)
		}
		for _, m := range r.Metrics {
			b.ReportMetric(m.Value, m.Unit)
		}
	}
}
