package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/mem"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock that follows the system clock plus an offset that a
// test can jump, as a process paused past its deadline would see.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time                         { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *fakeClock) jump(d time.Duration)                   { c.off.Add(int64(d)) }

// flaky wraps a backend to count calls and fail renewals on demand.
type flaky struct {
	dlock.Backend
	renews, batches atomic.Int32
	failure         atomic.Pointer[error] // renewals fail with it when set
}

func (f *flaky) setFail(err error) {
	if err == nil {
		f.failure.Store(nil)
		return
	}
	f.failure.Store(&err)
}

func (f *flaky) failing() error {
	if p := f.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *flaky) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	f.renews.Add(1)
	if err := f.failing(); err != nil {
		return err
	}
	return f.Backend.Renew(ctx, h, ttl)
}

// batching wraps a flaky backend and forwards batched renewals.
type batching struct{ *flaky }

func (b batching) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	b.batches.Add(1)
	if err := b.failing(); err != nil {
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return b.Backend.(dlock.BatchRenewer).RenewBatch(ctx, rs)
}

func newClient(t *testing.T, b dlock.Backend, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPauseIsSeenAtTheNextCheck(t *testing.T) {
	clk := &fakeClock{}
	c := newClient(t, mem.New(), dlock.WithClock(clk), dlock.TTL(10*time.Second))
	l, err := c.Mutex("p").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := l.Context()
	// The context's Deadline does not move with renewals: none without
	// MaxHold (see TestLeaseContextWithTimeoutFires).
	if dl, ok := ctx.Deadline(); ok {
		t.Fatalf("Context().Deadline() = %v, %v; want none", dl, ok)
	}
	if want := 10 * time.Second * 99 / 100; l.Deadline().Sub(clk.Now()) > want {
		t.Fatalf("deadline %v ahead, want at most TTL×(1−drift) = %v", l.Deadline().Sub(clk.Now()), want)
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	// A pause of 11s: the process resumes and checks at once, before any
	// goroutine of the client had a chance to run.
	clk.jump(11 * time.Second)
	err = l.Err()
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err() right after the pause = %v, want ErrLeaseLost", err)
	}
	if !strings.Contains(err.Error(), `"p"`) || !strings.Contains(err.Error(), "mem") {
		t.Errorf("error %q does not name the lock and the backend", err)
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Context().Err() = %v, want DeadlineExceeded and ErrLeaseLost", err)
	}
	if err := context.Cause(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("context.Cause = %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done() open after Err() reported the loss")
	}
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Error("a context derived from the lease's was not cancelled")
	}
	if err := l.Unlock(context.Background()); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock after the pause = %v, want ErrLeaseLost", err)
	}
}

func TestTransientRenewalErrorsAreRetried(t *testing.T) {
	f := &flaky{Backend: mem.New()}
	c := newClient(t, f, dlock.TTL(time.Second))
	l, err := c.Mutex("r").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Renewals fail until the keeper has retried (the first renewal is due
	// at a third of the TTL, retries follow every TTL/20); then they
	// recover, and the lease survives because the retries came well
	// within the lease. The waits are on events, not on fixed sleeps, so
	// a slow machine does not make the keeper look idle.
	f.setFail(errors.New("connection reset"))
	waitUntil(t, 5*time.Second, "two failed renewal attempts", func() bool { return f.renews.Load() >= 2 })
	before := l.Deadline()
	f.setFail(nil)
	waitUntil(t, 5*time.Second, "a renewal after the failures", func() bool { return l.Deadline().After(before) || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost despite renewals that recovered: %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	dlocktest.WaitFor(t, limit, func() error {
		if !cond() {
			return fmt.Errorf("no %s", what)
		}
		return nil
	})
}

func TestPersistentRenewalErrorLosesByDeadline(t *testing.T) {
	f := &flaky{Backend: mem.New()}
	c := newClient(t, f, dlock.TTL(300*time.Millisecond))
	l, err := c.Mutex("r").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("network unreachable")
	f.setFail(cause)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost although every renewal failed")
	}
	// Lost at its own deadline, before the store could have given it away.
	if time.Now().Before(l.Deadline()) {
		t.Errorf("lost before the deadline %v", l.Deadline())
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, cause) {
		t.Errorf("Err() = %v, want ErrLeaseLost wrapping the renewal error", err)
	}
}

func TestLossAnsweredByTheBackend(t *testing.T) {
	s := mem.NewStore()
	c := newClient(t, s.Backend(), dlock.TTL(300*time.Millisecond))
	l, err := c.Mutex("x").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Someone releases it with the holder's identity: the next renewal is
	// answered "not yours", and the lease is lost at once.
	if err := s.Backend().Release(context.Background(), dlock.Hold{Name: "x", Owner: l.Owner(), Token: l.Token()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost after the backend said it is gone")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err() = %v, want ErrLeaseLost, not a deadline", err)
	}
}

func TestRenewalsAreBatched(t *testing.T) {
	f := &flaky{Backend: mem.New()}
	c := newClient(t, batching{f}, dlock.TTL(300*time.Millisecond))
	var leases []*dlock.Lease
	for i := range 50 {
		l, err := c.Mutex(fmt.Sprint("b", i)).Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	time.Sleep(time.Second)
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		l.Unlock(context.Background())
	}
	// 50 leases × ~3 rounds: batched, that is a few calls, not 150.
	if b, r := f.batches.Load(), f.renews.Load(); b == 0 || b > 30 || r > 10 {
		t.Errorf("%d batch calls and %d single renewals for 50 leases over 3 TTLs", b, r)
	}
}

// countingClock is the system clock, counting the timers the renewal loop
// sets: one per pass over the leases.
type countingClock struct{ afters atomic.Int64 }

func (c *countingClock) Now() time.Time { return time.Now() }
func (c *countingClock) After(d time.Duration) <-chan time.Time {
	c.afters.Add(1)
	return time.After(d)
}

func TestLockDoesNotWakeTheRenewalLoop(t *testing.T) {
	clk := &countingClock{}
	c := newClient(t, mem.New(), dlock.WithClock(clk), dlock.TTL(time.Minute))
	ctx := context.Background()
	held, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	// The loop has started and looked at the first lease; each later lease
	// is due after it, so the loop sleeps on.
	for clk.afters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	before := clk.afters.Load()
	for i := range 200 {
		l, err := c.Mutex(fmt.Sprint("n", i%3)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := clk.afters.Load() - before; n > 2 {
		t.Errorf("200 Lock/Unlock pairs woke the renewal loop %d times", n)
	}
}

// TestLoneLockDoesNotWakeTheRenewalLoop: with no other lease held, the
// loop finds nothing to keep after a Lock/Unlock; the next Locks (due no
// sooner) must not wake it either.
func TestLoneLockDoesNotWakeTheRenewalLoop(t *testing.T) {
	clk := &countingClock{}
	c := newClient(t, mem.New(), dlock.WithClock(clk), dlock.TTL(time.Minute))
	ctx := context.Background()
	lockUnlock := func(name string) {
		t.Helper()
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lockUnlock("first")
	for clk.afters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the loop has looked and found nothing
	before := clk.afters.Load()
	for i := range 200 {
		lockUnlock(fmt.Sprint("n", i%3))
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // let a woken loop run
		}
	}
	if n := clk.afters.Load() - before; n > 2 {
		t.Errorf("200 Lock/Unlock pairs with no other lease woke the renewal loop %d times", n)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for url, want := range map[string]error{
		"nosuch://x":           dlock.ErrInvalidOption,
		"://bad":               dlock.ErrInvalidOption,
		"no-scheme":            dlock.ErrInvalidOption,
		"mem://x/with/path":    dlock.ErrInvalidOption,
		"mem://x?unknown=opts": dlock.ErrInvalidOption,
	} {
		c, err := dlock.Open(ctx, url)
		if !errors.Is(err, want) || c != nil {
			t.Errorf("Open(%q) = %v, %v; want %v", url, c, err, want)
		}
	}
	_, err := dlock.Open(ctx, "nosuch://x")
	if !strings.Contains(err.Error(), "nosuch") || !strings.Contains(err.Error(), "mem") {
		t.Errorf("unknown scheme error %q should name the scheme and the registered ones", err)
	}
	if _, err := dlock.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil) = %v", err)
	}
	for _, opt := range []dlock.Option{dlock.Owner("x"), dlock.Drift(0.7), dlock.Namespace(""), dlock.WithClock(nil), dlock.WithLogger(nil), dlock.TTL(0)} {
		if _, err := dlock.New(mem.New(), opt); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("New with a bad option: %v, want ErrInvalidOption", err)
		}
	}
}

func TestNamespace(t *testing.T) {
	s := mem.NewStore()
	a := newClient(t, s.Backend(), dlock.Namespace("app1"))
	b := newClient(t, s.Backend(), dlock.Namespace("app2"))
	ctx := context.Background()
	la, err := a.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatalf("the same name in another namespace: %v", err)
	}
	infos, err := a.Inspect(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Name != "job" || infos[0].Owner != la.Owner() {
		t.Errorf("Inspect in namespace app1 = %+v, %v", infos, err)
	}
	la.Unlock(ctx)
	lb.Unlock(ctx)
}

func TestCancelledWaitMatchesBothErrors(t *testing.T) {
	c := newClient(t, mem.New())
	ctx := context.Background()
	l, _ := c.Mutex("w").Lock(ctx)
	defer l.Unlock(ctx)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("w").Lock(wctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its context = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), `lock "w" on mem`) {
		t.Errorf("error %q does not name the lock and backend", err)
	}
}

func TestUnlockAndExtendRaceWithRenewals(t *testing.T) {
	c := newClient(t, mem.New(), dlock.TTL(dlock.MinTTL))
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Mutex(fmt.Sprint("u", i)).Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			for range 5 {
				time.Sleep(10 * time.Millisecond)
				if err := l.Extend(ctx, dlock.MinTTL); err != nil {
					t.Error(err)
				}
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// reporting is a backend that reports losses through LossReporter.
type reporting struct {
	dlock.Backend
	handler func(dlock.Hold, error)
}

func (r *reporting) ReportLoss(h func(dlock.Hold, error)) { r.handler = h }

func TestLossReportedByTheBackend(t *testing.T) {
	r := &reporting{Backend: mem.New()}
	c := newClient(t, r, dlock.TTL(time.Minute))
	l, err := c.Mutex("s").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Mutex("s2").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.handler == nil {
		t.Fatal("New did not register a loss handler")
	}
	cause := errors.New("session expired")
	r.handler(dlock.Hold{Name: "s", Owner: l.Owner(), Token: l.Token()}, cause)
	// Ended at once, long before the first renewal (20 s away).
	select {
	case <-l.Done():
	default:
		t.Fatal("reported loss did not end the lease at once")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "session expired") {
		t.Errorf("Err() = %v, want ErrLeaseLost with the cause", err)
	}
	if err := other.Err(); err != nil {
		t.Errorf("a loss reported for another hold ended this one: %v", err)
	}
	other.Unlock(context.Background())
}

// outage wraps a backend whose waiters fail with ErrBackendUnavailable
// for a while, as during a server restart.
type outage struct {
	dlock.Backend
	down atomic.Int32 // waiter calls left to fail
}

func (o *outage) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, w, err := o.Backend.Acquire(ctx, req)
	if w != nil {
		w = &outageWaiter{Waiter: w, o: o}
	}
	return g, w, err
}

type outageWaiter struct {
	dlock.Waiter
	o *outage
}

func (w *outageWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.o.down.Add(-1) >= 0 {
		return dlock.Grant{}, fmt.Errorf("%w: connection refused", dlock.ErrBackendUnavailable)
	}
	return w.Waiter.Acquire(ctx)
}

func TestWaiterRidesOutAnOutage(t *testing.T) {
	o := &outage{Backend: mem.New()}
	c := newClient(t, o)
	ctx := context.Background()
	held, err := c.Mutex("o").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o.down.Store(4)
	res := make(chan error, 1)
	go func() {
		l, err := c.Mutex("o").Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	time.Sleep(20 * time.Millisecond)
	held.Unlock(ctx)
	if err := <-res; err != nil {
		t.Fatalf("a waiter gave up during a short outage: %v", err)
	}
	if n := o.down.Load(); n >= 0 {
		t.Fatalf("the outage was not exercised (%d failures left)", n+1)
	}
	// With a context that ends during the outage, Lock says both.
	held, _ = c.Mutex("o").Lock(ctx)
	defer held.Unlock(ctx)
	o.down.Store(1 << 20)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(20 * time.Millisecond); held.Unlock(ctx) }()
	_, err = c.Mutex("o").Lock(wctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose context ended during an outage: %v", err)
	}
}

func TestTimedOutLockSaysWhoHeldIt(t *testing.T) {
	c := newClient(t, mem.New())
	ctx := context.Background()
	held, _ := c.Mutex("h").Lock(ctx)
	defer held.Unlock(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("h").Lock(wctx)
	var he *dlock.HeldError
	if !errors.As(err, &he) || he.Holder.Owner != held.Owner() || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock that timed out: %v; want the holder and the deadline", err)
	}
	if err := dlock.CheckName("ok/name"); err != nil {
		t.Error(err)
	}
	if err := dlock.CheckName("bad\x00"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("CheckName of a NUL name: %v", err)
	}
}
