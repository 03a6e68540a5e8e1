package workload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// Semaphorer is the least a library must offer to run the semaphore
// workload: a blocking acquisition of one permit of the semaphore called
// name with the given limit, which returns its release.
type Semaphorer interface {
	Acquire(ctx context.Context, name string, limit int) (release func(context.Context) error, err error)
}

// RWLocker is the least a library must offer to run the read-write
// workload: a blocking read lock and a blocking write lock by name, each
// returning its unlock.
type RWLocker interface {
	RLock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	Lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
}

// ClientSemaphorer is a Semaphorer that acquires c's Semaphores.
func ClientSemaphorer(c *dlock.Client) Semaphorer { return clientWeighted{c} }

// ClientRWLocker is an RWLocker that locks c's RWMutexes.
func ClientRWLocker(c *dlock.Client) RWLocker { return clientWeighted{c} }

type clientWeighted struct{ c *dlock.Client }

func (l clientWeighted) Acquire(ctx context.Context, name string, limit int) (func(context.Context) error, error) {
	return unlockOf(l.c.Semaphore(name, limit).Acquire(ctx))
}

func (l clientWeighted) RLock(ctx context.Context, name string) (func(context.Context) error, error) {
	return unlockOf(l.c.RWMutex(name).RLock(ctx))
}

func (l clientWeighted) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	return unlockOf(l.c.RWMutex(name).Lock(ctx))
}

func unlockOf(lease *dlock.Lease, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// The shapes of the weighted workloads.
const (
	// SemaphoreLimit is the limit of the semaphore workload's semaphore.
	SemaphoreLimit = 4
	// WeightedContenders is the number of contenders of the semaphore and
	// read-write workloads, each a process of its own.
	WeightedContenders = 16
	// RWWriteEvery makes every RWWriteEvery-th operation of a contender of
	// the read-write workload a write: 90% reads.
	RWWriteEvery = 10
)

// occupancy counts the holders of a weighted workload's name as the
// contenders see them, and the most seen at once. A holder is counted
// after its grant and until it starts its release, so the count never
// exceeds what the store holds: a count above the limit is a broken lock.
type occupancy struct {
	n, most atomic.Int64
}

func (o *occupancy) enter(w int64) int64 {
	n := o.n.Add(w)
	for m := o.most.Load(); n > m && !o.most.CompareAndSwap(m, n); m = o.most.Load() {
	}
	return n
}

func (o *occupancy) leave(w int64) { o.n.Add(-w) }

// waits collects the waits of a weighted workload, by class.
type waits struct {
	mu  sync.Mutex
	lat map[string][]time.Duration
}

func (w *waits) add(class string, d time.Duration) {
	w.mu.Lock()
	if w.lat == nil {
		w.lat = make(map[string][]time.Duration)
	}
	w.lat[class] = append(w.lat[class], d)
	w.mu.Unlock()
}

// contend runs one goroutine per contender until sp ends, and returns the
// time it took: op(wctx, g, i) is contender g's i-th operation, its waits
// bounded by wctx; an error of op stops the span, unless it came from the
// end of a timed span's grace.
func contend(ctx context.Context, n int, sp *Span, op func(wctx context.Context, g, i int) error) time.Duration {
	var wg sync.WaitGroup
	sp.begin()
	start := time.Now()
	wctx, cancel := sp.waitContext(ctx)
	defer cancel()
	for g := range n {
		wg.Go(func() {
			for i := 0; sp.next(); i++ {
				if err := op(wctx, g, i); err != nil {
					if wctx.Err() != nil && ctx.Err() == nil {
						return // a timed span's grace is over
					}
					sp.fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// SemaphoreContended: one goroutine per semaphorer, all on one semaphore
// of limit permits, each doing work while it holds a permit; grants/s, a
// waiter's wait p50/p99 (from the call to the grant), the most permits
// seen held at once (held-max, which must not pass limit), and Jain's
// fairness index over the goroutines' grants.
func SemaphoreContended(ctx context.Context, sems []Semaphorer, name string, limit int, work time.Duration, sp *Span) (Result, error) {
	r := Result{Workload: fmt.Sprintf("semaphore%dx%d", limit, len(sems))}
	var occ occupancy
	var w waits
	grants := make([]int, len(sems))
	elapsed := contend(ctx, len(sems), sp, func(wctx context.Context, g, _ int) error {
		t0 := time.Now()
		release, err := sems[g].Acquire(wctx, name, limit)
		if err != nil {
			return err
		}
		w.add("", time.Since(t0))
		grants[g]++
		if n := occ.enter(1); n > int64(limit) {
			sp.fail(fmt.Errorf("semaphore %q of %d: %d permits held at once", name, limit, n))
		}
		busy(work)
		occ.leave(1)
		return release(ctx)
	})
	if err := sp.failed(); err != nil {
		return r, err
	}
	r.Elapsed, r.Ops = elapsed, int64(len(w.lat[""]))
	r.add(float64(r.Ops)/elapsed.Seconds(), "grants/s")
	r.latency("wait-", w.lat[""])
	r.add(float64(occ.most.Load()), "held-max")
	r.add(jain(grants), "jain")
	return r, nil
}

// RWContended: one goroutine per locker, all on one read-write lock, each
// doing work while it holds it; every writeEvery-th operation of a
// goroutine is a write (the goroutines' writes staggered), the others
// reads. It reports grants/s (reads and writes), writes/s, a writer's
// wait p50/p99 and a reader's wait p50/p99 (from the call to the grant),
// and the most readers seen holding at once (readers-max). A writer seen
// holding beside anyone fails the run.
func RWContended(ctx context.Context, lockers []RWLocker, name string, writeEvery int, work time.Duration, sp *Span) (Result, error) {
	r := Result{Workload: fmt.Sprintf("rw%d", 100-100/writeEvery)}
	var readers, writers occupancy
	var w waits
	elapsed := contend(ctx, len(lockers), sp, func(wctx context.Context, g, i int) error {
		write := (i+g)%writeEvery == 0
		lock, class := lockers[g].RLock, "read-"
		if write {
			lock, class = lockers[g].Lock, "write-"
		}
		t0 := time.Now()
		unlock, err := lock(wctx, name)
		if err != nil {
			return err
		}
		w.add(class, time.Since(t0))
		// Each holder counts itself, then looks at the other count: of two
		// that overlap, one sees the other.
		if write {
			if n, rd := writers.enter(1), readers.n.Load(); n > 1 || rd > 0 {
				sp.fail(fmt.Errorf("read-write lock %q: a writer held it beside %d writers and %d readers", name, n-1, rd))
			}
		} else if readers.enter(1); writers.n.Load() > 0 {
			sp.fail(fmt.Errorf("read-write lock %q: a reader held it beside a writer", name))
		}
		busy(work)
		if write {
			writers.leave(1)
		} else {
			readers.leave(1)
		}
		return unlock(ctx)
	})
	if err := sp.failed(); err != nil {
		return r, err
	}
	reads, writes := w.lat["read-"], w.lat["write-"]
	r.Elapsed, r.Ops = elapsed, int64(len(reads)+len(writes))
	sec := elapsed.Seconds()
	r.add(float64(r.Ops)/sec, "grants/s")
	r.add(float64(len(writes))/sec, "writes/s")
	r.latency("write-wait-", writes)
	r.latency("read-wait-", reads)
	r.add(float64(readers.most.Load()), "readers-max")
	return r, nil
}
