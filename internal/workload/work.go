package workload

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Metric is one figure of a workload's [Result], in the units testing.B
// reports (ops/s, grants/s, p99-µs, B/lease...).
type Metric struct {
	Value float64
	Unit  string
}

// Result is what one workload measured.
type Result struct {
	Workload string        // e.g. "uncontended", "contended8", "herd100", "held10000"
	Ops      int64         // operations (grants) measured
	Elapsed  time.Duration // the measured time
	Metrics  []Metric      // in the order they are best shown
}

func (r *Result) add(v float64, unit string) { r.Metrics = append(r.Metrics, Metric{v, unit}) }

// Metric returns the value of the metric in unit, and whether r has it.
func (r Result) Metric(unit string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Unit == unit {
			return m.Value, true
		}
	}
	return 0, false
}

// latency adds the p50 and p99 of lat, in µs, as prefix+"p50-µs" and
// prefix+"p99-µs".
func (r *Result) latency(prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	r.add(q(0.50), prefix+"p50-µs")
	r.add(q(0.99), prefix+"p99-µs")
}

// Span says when the measured part of a workload ends: after n operations
// (testing.B's b.N) or d after it begins. A failure stops it early.
type Span struct {
	count   bool
	left    atomic.Int64
	d       time.Duration
	end     atomic.Int64 // UnixNano, once begun
	stopped atomic.Bool
	onBegin func()     // testing.B's ResetTimer, when counting for it
	mu      sync.Mutex // guards err
	err     error
}

// OpsSpan is a Span of n operations; onBegin, if not nil, is called as
// the measured part begins (testing.B's ResetTimer).
func OpsSpan(n int, onBegin func()) *Span {
	s := &Span{count: true, onBegin: onBegin}
	s.left.Store(int64(n))
	return s
}

// TimeSpan is a Span of the time d; onBegin is as for [OpsSpan].
func TimeSpan(d time.Duration, onBegin func()) *Span { return &Span{d: d, onBegin: onBegin} }

// spanGrace is how long after a timed span's end a Lock still waiting is
// let run before it is given up.
const spanGrace = time.Second

// waitContext returns the context for the Locks of a begun span. For a
// timed span it ends spanGrace after the span, so that a library whose
// waiters sleep between attempts (pglock: 20 s) cannot stretch a run long
// past its measured time; the grants of that grace are still counted, over
// the time they took.
func (s *Span) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.count {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Unix(0, s.end.Load()).Add(spanGrace))
}

// begin starts the measured part.
func (s *Span) begin() {
	if s.onBegin != nil {
		s.onBegin()
	}
	s.end.Store(time.Now().Add(s.d).UnixNano())
}

// next reports whether one more operation is to be measured.
func (s *Span) next() bool {
	if s.stopped.Load() {
		return false
	}
	if s.count {
		return s.left.Add(-1) >= 0
	}
	return time.Now().UnixNano() < s.end.Load()
}

// fail records the first error and stops the span.
func (s *Span) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.stopped.Store(true)
}

// failed returns the first error recorded.
func (s *Span) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// lockUnlock locks name with l and unlocks it, doing work in between.
func lockUnlock(ctx context.Context, l Locker, name string, work time.Duration) error {
	unlock, err := l.Lock(ctx, name)
	if err != nil {
		return err
	}
	busy(work)
	return unlock(ctx)
}

// busy spins for d: the work of a holder, kept on the CPU as real work is
// (a sleep would hand the CPU to the contenders and be rounded up).
func busy(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}

// Uncontended: one goroutine locks and unlocks one name; p50 and p99 of
// the pair.
func Uncontended(ctx context.Context, l Locker, name string, sp *Span) (Result, error) {
	r := Result{Workload: "uncontended"}
	var lat []time.Duration
	sp.begin()
	start := time.Now()
	for sp.next() {
		t0 := time.Now()
		if err := lockUnlock(ctx, l, name, 0); err != nil {
			return r, err
		}
		lat = append(lat, time.Since(t0))
	}
	r.Elapsed, r.Ops = time.Since(start), int64(len(lat))
	r.add(float64(r.Ops)/r.Elapsed.Seconds(), "ops/s")
	r.latency("", lat)
	return r, nil
}

// Distinct: goroutines sharing l, each on a name of its own; ops/s.
func Distinct(ctx context.Context, l Locker, prefix string, goroutines int, sp *Span) (Result, error) {
	r := Result{Workload: "distinct"}
	var ops atomic.Int64
	var wg sync.WaitGroup
	sp.begin()
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			name := fmt.Sprintf("%s%d", prefix, g)
			for sp.next() {
				if err := lockUnlock(ctx, l, name, 0); err != nil {
					sp.fail(err)
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	if err := sp.failed(); err != nil {
		return r, err
	}
	r.Elapsed, r.Ops = time.Since(start), ops.Load()
	r.add(float64(r.Ops)/r.Elapsed.Seconds(), "ops/s")
	return r, nil
}

// handoffs is the record of a contended run, kept by the holder of the
// lock (the holder alone takes its mutex, so it does not contend).
type handoffs struct {
	mu          sync.Mutex
	lastHolder  int
	lastRelease time.Time
	changes     int
	handoffs    []time.Duration
	waits       []time.Duration
	grants      []int
}

// granted records a grant to g that waited since t0, and returns when the
// holder's work may start.
func (h *handoffs) granted(g int, t0 time.Time) {
	got := time.Now()
	h.mu.Lock()
	h.grants[g]++
	h.waits = append(h.waits, got.Sub(t0))
	if h.lastHolder >= 0 && h.lastHolder != g {
		h.changes++
		h.handoffs = append(h.handoffs, got.Sub(h.lastRelease))
	}
	h.lastHolder = g
	h.mu.Unlock()
}

// releasing records that the holder starts its release now.
func (h *handoffs) releasing() {
	h.mu.Lock()
	h.lastRelease = time.Now()
	h.mu.Unlock()
}

// Contended: one goroutine per locker, all on one name, each doing work
// while it holds the lock; grants/s, owner changes/s (grants to another
// goroutine than the one that released last), a waiter's wait p50/p99,
// the hand-off latency p50/p99 from a release to the next holder's grant,
// and Jain's fairness index over the goroutines' grants.
func Contended(ctx context.Context, lockers []Locker, name string, work time.Duration, sp *Span) (Result, error) {
	r := Result{Workload: fmt.Sprintf("contended%d", len(lockers))}
	h := &handoffs{lastHolder: -1, grants: make([]int, len(lockers))}
	var wg sync.WaitGroup
	sp.begin()
	start := time.Now()
	wctx, cancel := sp.waitContext(ctx)
	defer cancel()
	for g, l := range lockers {
		wg.Go(func() {
			for sp.next() {
				t0 := time.Now()
				unlock, err := l.Lock(wctx, name)
				if err != nil {
					if wctx.Err() != nil && ctx.Err() == nil {
						return // a timed span's grace is over
					}
					sp.fail(err)
					return
				}
				h.granted(g, t0)
				busy(work)
				h.releasing()
				if err := unlock(ctx); err != nil {
					sp.fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := sp.failed(); err != nil {
		return r, err
	}
	r.Elapsed, r.Ops = time.Since(start), int64(len(h.waits))
	sec := r.Elapsed.Seconds()
	r.add(float64(r.Ops)/sec, "grants/s")
	r.add(float64(h.changes)/sec, "changes/s")
	r.latency("wait-", h.waits)
	r.latency("handoff-", h.handoffs)
	r.add(jain(h.grants), "jain")
	return r, nil
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
