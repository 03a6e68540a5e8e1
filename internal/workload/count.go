package workload

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// calls counts what the Clients of a scale workload ask of their backends,
// at the dlock.Backend and dlock.Waiter boundary: one count per method
// call (a RenewBatch is one call of many items). It keeps nothing per
// lease, so it does not weigh on the memory it helps to measure.
type calls struct {
	acquire, waiterAcquire, release, cancel atomic.Int64
	renew, renewBatch, renewItems           atomic.Int64
	renewErrs                               atomic.Int64 // renewal items that failed
	renewCut                                atomic.Int64 // of them, those cut off by the end of their ctx
	renewMax                                atomic.Int64 // the longest renewal call, ns
	wakes                                   atomic.Int64 // Waiter.Wait returns
	waiting                                 atomic.Int64 // Waiters registered and not yet granted or cancelled
}

// renewed counts a renewal item sent at t0 that ended with err.
func (c *calls) renewed(t0 time.Time, err error) {
	if err != nil {
		c.renewErrs.Add(1)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			c.renewCut.Add(1)
		}
	}
	d := int64(time.Since(t0))
	for m := c.renewMax.Load(); d > m && !c.renewMax.CompareAndSwap(m, d); m = c.renewMax.Load() {
	}
}

// snapshot is the counts of calls at one moment.
type snapshot struct {
	acquire, waiterAcquire, release, cancel int64
	renew, renewBatch, renewItems           int64
	wakes                                   int64
}

func (c *calls) snapshot() snapshot {
	return snapshot{
		acquire: c.acquire.Load(), waiterAcquire: c.waiterAcquire.Load(),
		release: c.release.Load(), cancel: c.cancel.Load(),
		renew: c.renew.Load(), renewBatch: c.renewBatch.Load(), renewItems: c.renewItems.Load(),
		wakes: c.wakes.Load(),
	}
}

func (s snapshot) sub(o snapshot) snapshot {
	return snapshot{
		acquire: s.acquire - o.acquire, waiterAcquire: s.waiterAcquire - o.waiterAcquire,
		release: s.release - o.release, cancel: s.cancel - o.cancel,
		renew: s.renew - o.renew, renewBatch: s.renewBatch - o.renewBatch, renewItems: s.renewItems - o.renewItems,
		wakes: s.wakes - o.wakes,
	}
}

// requests is every call that may reach the store.
func (s snapshot) requests() int64 {
	return s.acquire + s.waiterAcquire + s.release + s.cancel + s.renew + s.renewBatch
}

// renewals is the renewal calls: one per Renew, one per RenewBatch.
func (s snapshot) renewals() int64 { return s.renew + s.renewBatch }

// counted wraps b so that c counts its calls. The wrapper offers what the
// Client looks for on b — BatchRenewer and Inspector only when b has them,
// since the Client changes its behaviour on their presence; LossReporter,
// TTLLimiter and Granter always, as their absence means the same as a
// no-op ReportLoss, a MaxTTL of 0 and a CanGrant that refuses every kind
// but the mutex.
func counted(b dlock.Backend, c *calls) dlock.Backend {
	w := &countingBackend{b: b, c: c}
	br, batch := b.(dlock.BatchRenewer)
	in, inspect := b.(dlock.Inspector)
	switch {
	case batch && inspect:
		return struct {
			*countingBackend
			countingBatch
			dlock.Inspector
		}{w, countingBatch{br, c}, in}
	case batch:
		return struct {
			*countingBackend
			countingBatch
		}{w, countingBatch{br, c}}
	case inspect:
		return struct {
			*countingBackend
			dlock.Inspector
		}{w, in}
	}
	return w
}

type countingBackend struct {
	b dlock.Backend
	c *calls
}

func (w *countingBackend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	w.c.acquire.Add(1)
	g, wt, err := w.b.Acquire(ctx, req)
	if wt != nil {
		w.c.waiting.Add(1)
		wt = &countingWaiter{w: wt, c: w.c}
	}
	return g, wt, err
}

func (w *countingBackend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	w.c.renew.Add(1)
	w.c.renewItems.Add(1)
	t0 := time.Now()
	err := w.b.Renew(ctx, h, ttl)
	w.c.renewed(t0, err)
	return err
}

func (w *countingBackend) Release(ctx context.Context, h dlock.Hold) error {
	w.c.release.Add(1)
	return w.b.Release(ctx, h)
}

func (w *countingBackend) Close() error   { return w.b.Close() }
func (w *countingBackend) String() string { return w.b.String() }

func (w *countingBackend) ReportLoss(handler func(dlock.Hold, error)) {
	if lr, ok := w.b.(dlock.LossReporter); ok {
		lr.ReportLoss(handler)
	}
}

// CanGrant passes the kinds b grants on: without it a Client grants
// mutexes only.
func (w *countingBackend) CanGrant(kind dlock.Kind, limit int) error {
	if g, ok := w.b.(dlock.Granter); ok {
		return g.CanGrant(kind, limit)
	}
	return fmt.Errorf("%w: %s grants mutexes only, not a %s", errors.ErrUnsupported, w.b, dlock.Shape(kind, limit))
}

func (w *countingBackend) MaxTTL() time.Duration {
	if tl, ok := w.b.(dlock.TTLLimiter); ok {
		return tl.MaxTTL()
	}
	return 0
}

type countingBatch struct {
	b dlock.BatchRenewer
	c *calls
}

func (w countingBatch) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	w.c.renewBatch.Add(1)
	w.c.renewItems.Add(int64(len(rs)))
	t0 := time.Now()
	errs := w.b.RenewBatch(ctx, rs)
	for _, err := range errs {
		w.c.renewed(t0, err)
	}
	return errs
}

type countingWaiter struct {
	w    dlock.Waiter
	c    *calls
	done atomic.Bool // granted or cancelled: no longer waiting
}

func (w *countingWaiter) Wait(ctx context.Context) error {
	err := w.w.Wait(ctx)
	w.c.wakes.Add(1)
	return err
}

func (w *countingWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.c.waiterAcquire.Add(1)
	g, err := w.w.Acquire(ctx)
	if err == nil && w.done.CompareAndSwap(false, true) {
		w.c.waiting.Add(-1)
	}
	return g, err
}

func (w *countingWaiter) Cancel(ctx context.Context) error {
	w.c.cancel.Add(1)
	if w.done.CompareAndSwap(false, true) {
		w.c.waiting.Add(-1)
	}
	return w.w.Cancel(ctx)
}
