package dlocktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
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
//   - Contended: 8 goroutines, each with its own client (its own
//     connection), on one name; grants/s, owner changes/s (grants to
//     another goroutine than the one that released last), a waiter's wait
//     p50/p99, the hand-off latency p50/p99 from a release to the next
//     holder's grant, and Jain's fairness index over the goroutines' grants.
//   - Herd: many waiters on one name across several Clients ([BenchHerd]).
//
// and, once, Held: many leases held at once by one Client ([BenchHeld]).
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
				return clientLocker{c}
			})
			b.Run("Herd", func(b *testing.B) { BenchHerd(b, newBackend, opts, bopts...) })
		})
	}
	b.Run("Held", func(b *testing.B) { BenchHeld(b, newBackend, bopts...) })
}

type clientLocker struct{ c *dlock.Client }

func (l clientLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// BenchLockers runs the workloads of [Bench] on lockers made by newLocker;
// each call stands for a separate process with its own connection.
func BenchLockers(b *testing.B, newLocker func(b *testing.B) Locker) {
	prefix := "dlockbench/" + randHex(6) + "/"
	b.Run("Uncontended", func(b *testing.B) { uncontended(b, newLocker(b), prefix+"u") })
	b.Run("DistinctNames", func(b *testing.B) { distinct(b, newLocker(b), prefix+"d/", 32) })
	b.Run("Contended", func(b *testing.B) { contended(b, newLocker, prefix+"c", 8) })
}

func uncontended(b *testing.B, l Locker, name string) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		unlock, err := l.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, "", lat)
}

func distinct(b *testing.B, l Locker, prefix string, goroutines int) {
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s%d", prefix, g)
			for left.Add(-1) >= 0 {
				unlock, err := l.Lock(ctx, name)
				if err != nil {
					b.Error(err)
					return
				}
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
}

func contended(b *testing.B, newLocker func(*testing.B) Locker, name string, goroutines int) {
	ctx := context.Background()
	lockers := make([]Locker, goroutines)
	for i := range lockers {
		lockers[i] = newLocker(b)
	}
	var (
		left        atomic.Int64
		mu          sync.Mutex // guards what follows; taken only by the holder
		lastHolder  = -1
		lastRelease time.Time
		changes     int
		handoffs    []time.Duration
		waits       []time.Duration
		grants      = make([]int, goroutines)
		wg          sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				unlock, err := lockers[g].Lock(ctx, name)
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				mu.Lock()
				grants[g]++
				waits = append(waits, got.Sub(t0))
				if lastHolder >= 0 && lastHolder != g {
					changes++
					handoffs = append(handoffs, got.Sub(lastRelease))
				}
				lastHolder = g
				lastRelease = time.Now()
				mu.Unlock()
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "grants/s")
	b.ReportMetric(float64(changes)/el.Seconds(), "changes/s")
	reportLatency(b, "wait-", waits)
	reportLatency(b, "handoff-", handoffs)
	b.ReportMetric(jain(grants), "jain")
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

func reportLatency(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(q(0.50), prefix+"p50-µs")
	b.ReportMetric(q(0.99), prefix+"p99-µs")
}
