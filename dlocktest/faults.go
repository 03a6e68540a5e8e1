package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// faulty wraps a backend to model, on every backend and without a network
// proxy, the three states of a store that a client cannot tell apart by
// its own calls: a renewal applied by the store whose answer is lost, a
// store that stays silent (calls run until their context ends, and return
// its error, as the backends do on a silent link) and a store that is
// gone (calls fail at once). Cancel and Release always reach the store,
// so that the suite leaves nothing behind.
type faulty struct {
	dlock.Backend
	mode atomic.Int32
	// sentAt is when the renewal whose answer was lost reached the
	// wrapper (UnixNano): after the client's own send time.
	sentAt atomic.Int64
	// downCtx is cancelled when the mode becomes faultDown, to end the
	// Waits in flight as a dead store's connection would.
	downCtx context.Context
	goDown  context.CancelFunc
}

const (
	faultNone int32 = iota
	// faultLoseRenewAnswer: the next Renew is applied by the store and
	// its answer lost (the call returns its context's error once the
	// context ends); then faultRenewDown.
	faultLoseRenewAnswer
	// faultRenewDown: renewals fail without reaching the store.
	faultRenewDown
	// faultSilent: acquisitions and renewals do not answer until their
	// context ends.
	faultSilent
	// faultDown: acquisitions and renewals fail at once.
	faultDown
)

var errStoreDown = fmt.Errorf("%w: simulated dead store (connection refused)", dlock.ErrBackendUnavailable)

func newFaulty(b dlock.Backend) *faulty {
	f := &faulty{Backend: b}
	f.downCtx, f.goDown = context.WithCancel(context.Background())
	return f
}

// set switches to mode m.
func (f *faulty) set(m int32) {
	f.mode.Store(m)
	if m == faultDown {
		f.goDown()
	}
}

// fail returns how a call made now fails, or nil if it goes to the store.
func (f *faulty) fail(ctx context.Context) error {
	switch f.mode.Load() {
	case faultSilent:
		<-ctx.Done()
		return ctx.Err()
	case faultDown:
		return errStoreDown
	}
	return nil
}

func (f *faulty) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := f.fail(ctx); err != nil {
		return dlock.Grant{}, nil, err
	}
	g, w, err := f.Backend.Acquire(ctx, req)
	if w != nil {
		w = &faultyWaiter{Waiter: w, f: f}
	}
	return g, w, err
}

func (f *faulty) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	switch f.mode.Load() {
	case faultLoseRenewAnswer:
		f.sentAt.Store(time.Now().UnixNano())
		// Applied whatever ctx does, and then the answer is lost.
		f.Backend.Renew(context.WithoutCancel(ctx), h, ttl)
		f.mode.Store(faultRenewDown)
		<-ctx.Done()
		return ctx.Err()
	case faultRenewDown:
		return errStoreDown
	}
	if err := f.fail(ctx); err != nil {
		return err
	}
	return f.Backend.Renew(ctx, h, ttl)
}

// MaxTTL forwards the backend's maximum TTL (0: it states none).
func (f *faulty) MaxTTL() time.Duration { return maxTTLOf(f.Backend) }

// ReportLoss forwards to a backend that reports losses.
func (f *faulty) ReportLoss(h func(dlock.Hold, error)) {
	if lr, ok := f.Backend.(dlock.LossReporter); ok {
		lr.ReportLoss(h)
	}
}

func (f *faulty) Close() error {
	f.goDown()
	return f.Backend.Close()
}

type faultyWaiter struct {
	dlock.Waiter
	f *faulty
}

func (w *faultyWaiter) Wait(ctx context.Context) error {
	if err := w.f.fail(ctx); err != nil {
		return err
	}
	// A Wait in flight when the store dies ends as its connection does.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(w.f.downCtx, cancel)
	defer stop()
	err := w.Waiter.Wait(wctx)
	if ctx.Err() == nil && w.f.mode.Load() == faultDown {
		return errStoreDown
	}
	return err
}

func (w *faultyWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if err := w.f.fail(ctx); err != nil {
		return dlock.Grant{}, err
	}
	return w.Waiter.Acquire(ctx)
}

// lostShorterExtend checks that an Extend to a shorter TTL whose answer is
// lost counts as applied: the lease's Deadline is no later than the send
// time plus the shorter TTL, and another owner is never granted the lock
// while the first lease's Err() is nil. Renewals fail after it, so that
// the store lets the hold run out at the shorter TTL it applied.
func (s *suite) lostShorterExtend() {
	name := s.name("lse")
	short := s.cfg.ttl
	fb := newFaulty(s.f(s.t))
	a, b := s.clientOn(fb), s.client()
	long := min(20*short, a.MaxTTL())
	l, err := a.Mutex(name, dlock.TTL(long)).Lock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("Lock: %v", err)
	}
	defer l.Unlock(context.Background())
	fb.set(faultLoseRenewAnswer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = l.Extend(ctx, short)
	cancel()
	if err == nil {
		s.t.Fatalf("Extend(%v) whose answer was lost returned nil", short)
	}
	sent := time.Unix(0, fb.sentAt.Load())
	if dl := l.Deadline(); dl.After(sent.Add(short)) {
		s.t.Errorf("after an Extend(%v) from a %v TTL whose answer was lost, Deadline() is %v after the send time; want at most %v: the store may have applied it",
			short, long, dl.Sub(sent), short)
	}
	// Granted once the store let the shorter hold run out, or not at all
	// if the store kept the longer one (which is safe).
	bctx, cancel := context.WithTimeout(context.Background(), 4*short+3*time.Second)
	defer cancel()
	l2, err := b.Mutex(name).Lock(bctx)
	switch {
	case err == nil:
		if aerr := l.Err(); aerr == nil {
			s.t.Errorf("another owner was granted %q (token %d) %v after the lost Extend(%v) while the first lease (token %d) is still valid until %v",
				name, l2.Token(), time.Since(sent), short, l.Token(), time.Until(l.Deadline()))
		}
		l2.Unlock(context.Background())
	case errors.Is(err, dlock.ErrNotAcquired):
		s.t.Logf("the store kept the first hold past %v (it did not apply the shorter TTL): safe", time.Since(sent))
	default:
		s.t.Errorf("another owner's Lock: %v", err)
	}
}

// leaseContextTimeout checks the everyday idiom
// context.WithTimeout(lease.Context(), d) with d past the lease's current
// validity: it fires at d while the lease renews itself (a lease context
// whose Deadline moved with the renewals never armed the timer), and
// successive Deadline() calls of the lease's context agree across
// renewals.
func (s *suite) leaseContextTimeout() {
	ttl := s.cfg.ttl
	a := s.client(dlock.TTL(ttl))
	l := s.lock(a.Mutex(s.name("ctx")))
	defer s.unlock(l)
	d1, ok1 := l.Context().Deadline()
	before := l.Deadline()
	d := 3 * ttl
	start := time.Now()
	ctx, cancel := context.WithTimeout(l.Context(), d)
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(d + 10*time.Second):
		s.t.Fatalf("context.WithTimeout(lease.Context(), %v) has not fired after %v (lease TTL %v, lease Err %v)", d, time.Since(start), ttl, l.Err())
	}
	if el := time.Since(start); el < d {
		s.t.Errorf("context.WithTimeout(lease.Context(), %v) fired after %v", d, el)
	}
	if err := l.Err(); err != nil {
		s.t.Fatalf("the lease was lost while its context's timeout ran: %v", err)
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		s.t.Errorf("context.WithTimeout(lease.Context(), %v).Err() = %v, want context.DeadlineExceeded", d, err)
	}
	if !l.Deadline().After(before) {
		s.t.Fatalf("the lease's Deadline did not move in %v with a TTL of %v", time.Since(start), ttl)
	}
	if d2, ok2 := l.Context().Deadline(); !d2.Equal(d1) || ok2 != ok1 {
		s.t.Errorf("lease.Context().Deadline() = %v, %v before renewals and %v, %v after: a context's Deadline must not move", d1, ok1, d2, ok2)
	}
}

// silentStoreNotBusy checks that an acquisition against a store that does
// not answer never reports "not acquired" alone: TryLock and Lock whose
// context ends before the answer match ErrBackendUnavailable as well as
// ErrNotAcquired and ctx.Err().
func (s *suite) silentStoreNotBusy() {
	name := s.name("silent")
	fb := newFaulty(s.f(s.t))
	a := s.clientOn(fb)
	s.unlock(s.lock(a.Mutex(name))) // connections made while the store answers
	fb.set(faultSilent)
	for _, op := range []string{"TryLock", "Lock"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m := a.Mutex(name)
		lock := m.Lock
		if op == "TryLock" {
			lock = m.TryLock
		}
		l, err := lock(ctx)
		cancel()
		if l != nil {
			l.Unlock(context.Background())
		}
		if !errors.Is(err, dlock.ErrBackendUnavailable) || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			s.t.Errorf("%s whose context ended while the store did not answer: %v; want ErrBackendUnavailable, ErrNotAcquired and context.DeadlineExceeded", op, err)
		}
	}
}

// storeDownWhileWaiting checks that a Lock that waits for a held lock and
// whose store dies meanwhile reports, when its context ends, that the
// store is unavailable — not that the lock is busy.
func (s *suite) storeDownWhileWaiting() {
	name := s.name("down")
	holder := s.client()
	h := s.lock(holder.Mutex(name, dlock.TTL(max(30*time.Second, s.cfg.ttl))))
	defer s.unlock(h)
	fb := newFaulty(s.f(s.t))
	waiter := s.clientOn(newObserved(fb))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := startWaiting(waiter, name, ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	fb.set(faultDown)
	time.Sleep(200 * time.Millisecond) // the waiter meets the dead store
	cancel()
	r := <-res
	if r.l != nil {
		r.l.Unlock(context.Background())
	}
	if !errors.Is(r.err, dlock.ErrBackendUnavailable) || !errors.Is(r.err, dlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		s.t.Errorf("Lock whose store died while it waited, then cancelled: %v; want ErrBackendUnavailable, ErrNotAcquired and context.Canceled", r.err)
	}
}
