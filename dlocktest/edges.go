package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// observed wraps a backend to count acquisition attempts (Backend.Acquire
// and Waiter.Acquire) and to tell when an acquisition has been registered
// as a waiter: the suite learns that a Lock is queued from the backend's
// answer itself, not from OnWait, which fires only when the backend names
// the holder (a *dlock.HeldError, which the contract does not require).
// It forwards the optional interfaces whose absence would change what a
// Client does (TTLLimiter, LossReporter).
type observed struct {
	dlock.Backend
	attempts atomic.Int64

	mu      sync.Mutex
	queued  int           // acquisitions answered with a Waiter
	changed chan struct{} // closed and replaced when queued grows
}

func newObserved(b dlock.Backend) *observed {
	return &observed{Backend: b, changed: make(chan struct{})}
}

// waiterClient returns a new Client on a new, observed backend, for the
// items that need to know when a Lock waits (see [suite.waitFor]).
func (s *suite) waiterClient(opts ...dlock.Option) *dlock.Client {
	s.t.Helper()
	return s.clientOn(newObserved(s.f(s.t)), opts...)
}

func (o *observed) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	o.attempts.Add(1)
	g, w, err := o.Backend.Acquire(ctx, req)
	if w != nil {
		o.mu.Lock()
		o.queued++
		close(o.changed)
		o.changed = make(chan struct{})
		o.mu.Unlock()
		w = &observedWaiter{Waiter: w, o: o}
	}
	return g, w, err
}

// state returns how many acquisitions were queued so far and a channel
// closed at the next.
func (o *observed) state() (int, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued, o.changed
}

// MaxTTL forwards the backend's maximum TTL (0: it states none).
func (o *observed) MaxTTL() time.Duration { return maxTTLOf(o.Backend) }

// ReportLoss forwards to a backend that reports losses.
func (o *observed) ReportLoss(h func(dlock.Hold, error)) {
	if lr, ok := o.Backend.(dlock.LossReporter); ok {
		lr.ReportLoss(h)
	}
}

func maxTTLOf(b dlock.Backend) time.Duration {
	if tl, ok := b.(dlock.TTLLimiter); ok {
		return tl.MaxTTL()
	}
	return 0
}

type observedWaiter struct {
	dlock.Waiter
	o *observed
}

func (w *observedWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.o.attempts.Add(1)
	return w.Waiter.Acquire(ctx)
}

// startWaiting starts Lock of name on c, whose backend is observed, and
// returns once the backend has queued it, with a channel for its result;
// or an error if Lock returned instead of waiting.
func startWaiting(c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) (<-chan lockResult, error) {
	return startWaitingFn(c, name, func() (*dlock.Lease, error) { return c.Mutex(name, opts...).Lock(ctx) })
}

// startWaitingFn starts lock, an acquisition of name on c (a client on an
// observed backend), and returns once the backend has registered it as a
// waiter.
func startWaitingFn(c *dlock.Client, name string, lock func() (*dlock.Lease, error)) (<-chan lockResult, error) {
	obs, ok := c.Backend().(*observed)
	if !ok {
		return nil, errors.New("dlocktest: startWaiting needs a client on an observed backend")
	}
	n0, changed := obs.state()
	res := make(chan lockResult, 1)
	go func() {
		l, err := lock()
		res <- lockResult{l, err}
	}()
	for {
		select {
		case <-changed:
			var n int
			if n, changed = obs.state(); n > n0 {
				return res, nil
			}
		case r := <-res:
			if r.l != nil {
				r.l.Unlock(context.Background())
			}
			return nil, fmt.Errorf("Lock(%q) returned (%v, %v) instead of waiting", name, r.l, r.err)
		}
	}
}

// Bounds of the WokenNotPolling item.
const (
	wokenQuiet       = 2 * time.Second  // how long attempts are counted while the lock is held
	wokenMaxAttempts = 3                // how many a woken waiter may make meanwhile
	wokenHandOff     = 10 * time.Second // release to grant, loosely, for a loaded machine
)

// checkWoken checks that a waiter is woken rather than polling: while
// another owner holds name with a long TTL, the waiting Lock on waiter
// (a client on an observed backend) makes next to no attempts; once the
// lock is released, it is granted. A waiter that polls every 400 ms makes
// five attempts in the quiet time and fails.
func checkWoken(ctx context.Context, holder, waiter *dlock.Client, name string) (err error) {
	obs, ok := waiter.Backend().(*observed)
	if !ok {
		return errors.New("dlocktest: checkWoken needs a waiter client on an observed backend")
	}
	const ttl = 30 * time.Second
	h, err := holder.Mutex(name, dlock.TTL(ttl)).Lock(ctx)
	if err != nil {
		return fmt.Errorf("holder's Lock: %w", err)
	}
	defer func() {
		if h != nil {
			h.Unlock(context.Background())
		}
	}()
	res, err := startWaiting(waiter, name, ctx, dlock.TTL(ttl))
	if err != nil {
		return err
	}
	before := obs.attempts.Load()
	var errs []error
	select {
	case r := <-res:
		if r.l != nil {
			r.l.Unlock(context.Background())
		}
		return fmt.Errorf("the waiter's Lock returned (%v, %v) while another owner held the lock", r.l, r.err)
	case <-time.After(wokenQuiet):
	}
	if n := obs.attempts.Load() - before; n > wokenMaxAttempts {
		errs = append(errs, fmt.Errorf("the waiter made %d acquisition attempts in %v while another owner held the lock with a %v TTL; a woken waiter makes next to none (at most %d allowed): it polls",
			n, wokenQuiet, ttl, wokenMaxAttempts))
	}
	if err := h.Unlock(ctx); err != nil {
		errs = append(errs, fmt.Errorf("holder's Unlock: %w", err))
	}
	h = nil
	select {
	case r := <-res:
		if r.err != nil {
			errs = append(errs, fmt.Errorf("the waiter's Lock after the release: %w", r.err))
		} else if err := r.l.Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("the waiter's Unlock: %w", err))
		}
	case <-time.After(wokenHandOff):
		errs = append(errs, fmt.Errorf("the waiter was not granted within %v of the release", wokenHandOff))
		// Lock ends with ctx; let the caller's clean-up close the client.
	}
	return errors.Join(errs...)
}

func (s *suite) wokenNotPolling() {
	holder, waiter := s.client(), s.waiterClient()
	if err := checkWoken(s.ctx(time.Minute), holder, waiter, s.name("w")); err != nil {
		s.t.Error(err)
	}
}

// extremeTTL checks TTLs at the edges: the maximum the backend accepts is
// kept, anything above it (math.MaxInt64 included) is refused before it
// reaches the store, and TTLs that are not whole units of the store's
// clock are rounded up, not down: after each grant another owner is
// refused while the first lease is valid.
func (s *suite) extremeTTL() {
	a, b := s.client(), s.client()
	maxTTL := a.MaxTTL()
	ctx := s.ctx(time.Minute)
	grants := []time.Duration{maxTTL, dlock.MinTTL, dlock.MinTTL + 1, dlock.MinTTL + time.Millisecond - 1,
		time.Second + 1, 1500*time.Millisecond + 1, 2*time.Second - 1}
	for i, ttl := range grants {
		if ttl > maxTTL {
			continue
		}
		name := s.name(fmt.Sprint("g", i))
		l, err := a.Mutex(name, dlock.TTL(ttl)).TryLock(ctx)
		if err != nil {
			s.t.Errorf("TryLock with TTL %v (maximum %v): %v", ttl, maxTTL, err)
			continue
		}
		time.Sleep(50 * time.Millisecond)
		l2, err := b.Mutex(name).TryLock(ctx)
		switch {
		case err == nil && l.Err() == nil:
			s.t.Errorf("TTL %v: another owner was granted %q (token %d) 50ms after the first grant (token %d), whose lease is still valid",
				ttl, name, l2.Token(), l.Token())
		case err == nil:
			s.t.Logf("TTL %v: the first lease was lost within 50ms (a slow machine?): %v", ttl, l.Err())
		case !errors.Is(err, dlock.ErrNotAcquired):
			s.t.Errorf("TTL %v: another owner's TryLock: %v, want ErrNotAcquired", ttl, err)
		}
		if l2 != nil {
			l2.Unlock(ctx)
		}
		// A short TTL may run out on a loaded machine (renewals every
		// TTL/3 come late); the lease then reports it, which is no fault.
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrLeaseLost) {
			s.t.Errorf("TTL %v: Unlock: %v", ttl, err)
		}
	}
	// Above the maximum: refused on Lock, TryLock and Extend, nothing written.
	name := s.name("above")
	for _, ttl := range []time.Duration{maxTTL + 1, maxTTL + time.Second, math.MaxInt64} {
		l, err := a.Mutex(name, dlock.TTL(ttl)).TryLock(ctx)
		if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
			if l != nil {
				l.Unlock(ctx)
			}
			s.t.Errorf("TryLock with TTL %v above the maximum %v = %v, %v; want ErrInvalidOption", ttl, maxTTL, l, err)
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err = a.Mutex(name, dlock.TTL(ttl)).Lock(lctx)
		cancel()
		if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
			if l != nil {
				l.Unlock(ctx)
			}
			s.t.Errorf("Lock with TTL %v above the maximum %v = %v, %v; want ErrInvalidOption", ttl, maxTTL, l, err)
		}
	}
	l, err := b.Mutex(name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock after the refused TTLs: %v (was something written?)", err)
	}
	if err := l.Extend(ctx, math.MaxInt64); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Extend(math.MaxInt64): %v, want ErrInvalidOption", err)
	}
	if err := l.Extend(ctx, maxTTL+1); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Extend(maximum+1ns): %v, want ErrInvalidOption", err)
	}
	if err := l.Err(); err != nil {
		s.t.Errorf("lease after refused Extends: %v", err)
	}
	s.mustBeHeld(a, name)
	s.unlock(l)
}

// namespaceIsolation checks that every (namespace, name) pair is a lock of
// its own: namespace N with name "job" is not the name N+"/job" without a
// namespace, nor namespace N+"/job" with another name, and so on.
func (s *suite) namespaceIsolation() {
	base := "dlt" + randHex(6) + "/"
	m := "\x1f"
	pairs := []struct{ ns, name string }{
		{base + "app", "job"},
		{"", base + "app/job"},
		{base + "app/job", "x"},
		{base + "app", "job/x"},
		{"", base + "app/job/x"},
		{"", m + base + "app" + m + "job"},
		{"", m + m + base + "app" + m + "job"},
		{base + "app/", "job"},
	}
	type held struct {
		c, other *dlock.Client
		l        *dlock.Lease
	}
	clients := map[string][2]*dlock.Client{}
	var hs []held
	ctx := s.ctx(time.Minute)
	for _, p := range pairs {
		cs, ok := clients[p.ns]
		if !ok {
			var opts []dlock.Option
			if p.ns != "" {
				opts = append(opts, dlock.Namespace(p.ns))
			}
			cs = [2]*dlock.Client{s.client(opts...), s.client(opts...)}
			clients[p.ns] = cs
		}
		l, err := cs[0].Mutex(p.name).TryLock(ctx)
		if err != nil {
			s.t.Fatalf("TryLock(%q) in namespace %q while the other pairs are held: %v", p.name, p.ns, err)
		}
		hs = append(hs, held{cs[0], cs[1], l})
	}
	for i, h := range hs {
		s.mustBeHeld(h.other, pairs[i].name)
	}
	if _, ok := clients[base+"app"][0].Backend().(dlock.Inspector); ok {
		infos, err := clients[base+"app"][0].Inspect(ctx, "")
		if err != nil {
			s.t.Fatalf("Inspect in namespace %q: %v", base+"app", err)
		}
		got := map[string]bool{}
		for _, info := range infos {
			got[info.Namespace+"|"+info.Name] = true
		}
		want := map[string]bool{base + "app|job": true, base + "app|job/x": true}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			s.t.Errorf("Inspect in namespace %q lists %v, want %v", base+"app", got, want)
		}
	}
	// Releasing one pair frees that pair only; the others stay held, and
	// their tokens go on independently.
	first := hs[0]
	if err := first.l.Unlock(ctx); err != nil {
		s.t.Fatalf("Unlock: %v", err)
	}
	l, err := first.other.Mutex(pairs[0].name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock(%q) in namespace %q after its release: %v", pairs[0].name, pairs[0].ns, err)
	}
	if l.Token() <= first.l.Token() {
		s.t.Errorf("token %d after the release is not above %d", l.Token(), first.l.Token())
	}
	for i, h := range hs[1:] {
		s.mustBeHeld(h.other, pairs[i+1].name)
		if err := h.l.Err(); err != nil {
			s.t.Errorf("lease of %q in namespace %q: %v", pairs[i+1].name, pairs[i+1].ns, err)
		}
	}
	s.unlock(l)
	for _, h := range hs[1:] {
		s.unlock(h.l)
	}
}
