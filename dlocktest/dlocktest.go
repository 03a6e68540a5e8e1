// Package dlocktest is the conformance suite for dlock backends, in the
// manner of testing/fstest and golang.org/x/net/nettest: every backend's
// tests call [Run] with a function that connects a new backend to the store
// under test, and so can the tests of a third party's backend.
//
//	func TestConformance(t *testing.T) {
//		srv := startServer(t)
//		dlocktest.Run(t, func(t testing.TB) dlock.Backend {
//			return mybackend.New(srv.Addr())
//		})
//	}
//
// Each item is a named subtest under a watchdog that ends a hung test with a
// dump of every goroutine. Run the suite under the race detector. [Bench]
// runs the standard benchmark workloads on the same kind of factory.
package dlocktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"go.uber.org/goleak"
)

// Factory connects a new backend to the store under test. Run calls it
// several times in one subtest, each backend standing for a separate
// process; all of them must see the same locks. The factory may register
// clean-up with t.Cleanup; the backend itself is closed by the suite.
type Factory func(t testing.TB) dlock.Backend

// Option adjusts the suite to a backend.
type Option func(*config)

type config struct {
	ttl       time.Duration
	watchdog  time.Duration
	grants    int
	names     int
	leakCheck bool
	foreign   *foreignHooks // see PlantForeign
	reclaim   *reclaimHooks // see Reclaim
}

// ShortTTL sets the TTL of the items that wait for an expiry (default
// 500ms). Backends whose store counts in coarse units use more (etcd: 2s).
func ShortTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// Watchdog sets how long one subtest may run before the suite ends the test
// binary with a goroutine dump (default 2 minutes).
func Watchdog(d time.Duration) Option { return func(c *config) { c.watchdog = d } }

// Grants sets how many grants each of the 16 goroutines of the exclusion
// item makes (default 200).
func Grants(n int) Option { return func(c *config) { c.grants = n } }

// Names sets how many distinct names the many-names item holds at once
// (default 1000), for backends where every held lock costs a scarce
// resource — a database connection in the SQL backends' session mode.
// n is at least 10.
func Names(n int) Option { return func(c *config) { c.names = max(n, 10) } }

// NoLeakCheck turns off the goroutine-leak check that follows every
// subtest, for backends whose client library keeps goroutines that
// outlive their closing (say why where you use it).
func NoLeakCheck() Option { return func(c *config) { c.leakCheck = false } }

// Run runs the conformance suite against the backends made by newBackend.
func Run(t *testing.T, newBackend Factory, opts ...Option) {
	cfg := config{ttl: 500 * time.Millisecond, watchdog: 2 * time.Minute, grants: 200, names: 1000, leakCheck: true}
	for _, o := range opts {
		o(&cfg)
	}
	for _, tc := range []struct {
		name string
		fn   func(*suite)
	}{
		{"Exclusion", (*suite).exclusion},
		{"TokensIncrease", (*suite).tokensIncrease},
		{"ExpiryAfterAbandon", (*suite).expiryAfterAbandon},
		{"ReleaseAfterLoss", (*suite).releaseAfterLoss},
		{"Renewal", (*suite).renewal},
		{"MaxHold", (*suite).maxHold},
		{"ReentrantOwner", (*suite).reentrantOwner},
		{"ReentrantContext", (*suite).reentrantContext},
		{"FairFIFO", (*suite).fairFIFO},
		{"TryLockWhileHeld", (*suite).tryLockWhileHeld},
		{"CancelledWaiter", (*suite).cancelledWaiter},
		{"CancelledFairWaiter", (*suite).cancelledFairWaiter},
		{"InvalidInput", (*suite).invalidInput},
		{"ManyNames", (*suite).manyNames},
		{"CloseWithLocksHeld", (*suite).closeWithLocksHeld},
		{"Extend", (*suite).extend},
		{"ForeignData", (*suite).foreignData},
		{"ReclaimKeepsTokens", (*suite).reclaimKeepsTokens},
		{"InspectWaiters", (*suite).inspectWaiters},
		{"WokenNotPolling", (*suite).wokenNotPolling},
		{"ExtremeTTL", (*suite).extremeTTL},
		{"NamespaceIsolation", (*suite).namespaceIsolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cfg.leakCheck {
				// Registered first, so it runs after every other clean-up of
				// the subtest, the factory's included.
				ignore := goleak.IgnoreCurrent()
				t.Cleanup(func() {
					if !t.Failed() {
						goleak.VerifyNone(t, ignore)
					}
				})
			}
			stop := watchdog(t, cfg.watchdog)
			defer stop()
			tc.fn(&suite{t: t, f: newBackend, cfg: cfg, prefix: "dlocktest/" + randHex(6) + "/" + tc.name + "/"})
		})
	}
}

// watchdog ends the test binary with every goroutine's stack if the test
// runs longer than d: a hung lock test must not hang CI.
func watchdog(t testing.TB, d time.Duration) (stop func()) {
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "dlocktest: %s did not finish within %v; goroutines:\n%s\n", t.Name(), d, buf)
		panic("dlocktest: " + t.Name() + " timed out")
	})
	return func() { timer.Stop() }
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type suite struct {
	t      *testing.T
	f      Factory
	cfg    config
	prefix string
}

// name returns a lock name unique to this run of the subtest.
func (s *suite) name(n string) string { return s.prefix + n }

// client returns a new Client on a new backend, closed at clean-up.
func (s *suite) client(opts ...dlock.Option) *dlock.Client {
	s.t.Helper()
	return s.clientOn(s.f(s.t), opts...)
}

func (s *suite) clientOn(b dlock.Backend, opts ...dlock.Option) *dlock.Client {
	s.t.Helper()
	c, err := dlock.New(b, opts...)
	if err != nil {
		s.t.Fatalf("dlock.New: %v", err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// crashable wraps a backend so that the suite can make its client stop
// renewing and releasing, as a crashed process would. Crash also closes
// the backend without releasing anything, which for session-based stores
// ends the session as a process exit would.
type crashable struct {
	dlock.Backend
	crashed atomic.Bool
	noRenew atomic.Bool // renewals fail, releases go through
	once    sync.Once
}

var errCrashed = fmt.Errorf("%w: simulated crash", dlock.ErrBackendUnavailable)

func (c *crashable) crash() {
	c.crashed.Store(true)
	c.once.Do(func() { c.Backend.Close() })
}

func (c *crashable) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if c.crashed.Load() || c.noRenew.Load() {
		return errCrashed
	}
	return c.Backend.Renew(ctx, h, ttl)
}

func (c *crashable) Release(ctx context.Context, h dlock.Hold) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return c.Backend.Release(ctx, h)
}

// MaxTTL forwards the backend's maximum TTL (0: it states none).
func (c *crashable) MaxTTL() time.Duration { return maxTTLOf(c.Backend) }

func (c *crashable) Close() error {
	var err error
	c.once.Do(func() { err = c.Backend.Close() })
	return err
}

func (s *suite) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	s.t.Cleanup(cancel)
	return ctx
}

func (s *suite) lock(m *dlock.Mutex) *dlock.Lease {
	s.t.Helper()
	l, err := m.Lock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("Lock(%q): %v", m.Name(), err)
	}
	return l
}

func (s *suite) unlock(l *dlock.Lease) {
	s.t.Helper()
	if err := l.Unlock(s.ctx(time.Minute)); err != nil {
		s.t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

// mustBeHeld checks that another owner cannot take the lock now.
func (s *suite) mustBeHeld(c *dlock.Client, name string) {
	s.t.Helper()
	l, err := c.Mutex(name).TryLock(s.ctx(time.Minute))
	if err == nil {
		l.Unlock(context.Background())
		s.t.Fatalf("TryLock(%q) by another owner succeeded; the lock should be held", name)
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		s.t.Fatalf("TryLock(%q): %v, want ErrNotAcquired", name, err)
	}
}

func (s *suite) exclusion() {
	const goroutines, clients = 16, 4
	name := s.name("x")
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		cs[i] = s.client()
	}
	// The counter and the last token are guarded by the lock under test
	// only. They are read and written with separate atomic operations so
	// that the race detector, which cannot see the synchronization a remote
	// store provides, stays quiet, while a read-modify-write by two holders
	// at once still loses an update.
	var (
		inside   atomic.Int32
		counter  atomic.Int64
		lastTok  atomic.Uint64
		overlaps atomic.Int32
		wg       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := cs[g%clients].Mutex(name)
			for range s.cfg.grants {
				l, err := m.Lock(s.ctx(time.Minute))
				if err != nil {
					s.t.Errorf("Lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if last := lastTok.Load(); l.Token() <= last {
					s.t.Errorf("token %d granted after token %d", l.Token(), last)
				}
				lastTok.Store(l.Token())
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				if err := l.Err(); err != nil {
					s.t.Errorf("lease lost inside the critical section: %v", err)
				}
				inside.Add(-1)
				if err := l.Unlock(s.ctx(time.Minute)); err != nil {
					s.t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		s.t.Errorf("%d grants overlapped another holder", n)
	}
	if want := int64(goroutines * s.cfg.grants); counter.Load() != want {
		s.t.Errorf("counter = %d after %d grants: updates were lost", counter.Load(), want)
	}
}

func (s *suite) tokensIncrease() {
	name := s.name("t")
	a, b := s.client(), s.client()
	var last uint64
	for i := range 20 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l := s.lock(c.Mutex(name))
		if l.Token() <= last {
			s.t.Fatalf("grant %d: token %d is not above the previous %d", i, l.Token(), last)
		}
		last = l.Token()
		if l.Holds() != 1 {
			s.t.Fatalf("grant %d: Holds() = %d, want 1", i, l.Holds())
		}
		s.unlock(l)
	}
	// Another name has its own sequence, which also only goes up.
	l := s.lock(a.Mutex(s.name("t2")))
	if l.Token() == 0 {
		s.t.Fatalf("token 0 granted")
	}
	s.unlock(l)
}

// abandon takes name on a crashable client with the short TTL and crashes
// it: the backend still holds the lock until its TTL runs out.
func (s *suite) abandon(name string) (*dlock.Lease, *crashable) {
	s.t.Helper()
	cb := &crashable{Backend: s.f(s.t)}
	a := s.clientOn(cb, dlock.TTL(s.cfg.ttl))
	l := s.lock(a.Mutex(name))
	cb.crash()
	return l, cb
}

func (s *suite) expiryAfterAbandon() {
	name := s.name("e")
	b := s.client()
	lost, _ := s.abandon(name)
	l := s.lock(b.Mutex(name)) // waits for the expiry
	if err := lost.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("when another owner was granted the lock, the abandoned lease's Err() = %v, want ErrLeaseLost", err)
	}
	select {
	case <-lost.Done():
	default:
		s.t.Errorf("when another owner was granted the lock, the abandoned lease's Done() was open")
	}
	if err := lost.Context().Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, context.DeadlineExceeded) {
		s.t.Errorf("abandoned lease's Context().Err() = %v, want ErrLeaseLost and context.DeadlineExceeded", err)
	}
	if l.Token() <= lost.Token() {
		s.t.Errorf("token after expiry %d is not above the expired holder's %d", l.Token(), lost.Token())
	}
	s.unlock(l)
}

func (s *suite) releaseAfterLoss() {
	name := s.name("r")
	lost, _ := s.abandon(name)
	b, other := s.client(), s.client()
	l := s.lock(b.Mutex(name))
	// The crashed process comes back and releases: its backend is gone, so
	// replay the release on a live backend as the stale holder would.
	live := s.f(s.t)
	defer live.Close()
	rel := dlock.Hold{Name: name, Owner: lost.Owner(), Token: lost.Token()}
	if err := live.Release(s.ctx(time.Minute), rel); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("stale release: %v, want ErrLeaseLost", err)
	}
	if err := live.Renew(s.ctx(time.Minute), rel, time.Minute); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("stale renewal: %v, want ErrLeaseLost", err)
	}
	if err := lost.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Unlock of the lost lease: %v, want ErrLeaseLost", err)
	}
	// The new holder is untouched.
	s.mustBeHeld(other, name)
	if err := l.Extend(s.ctx(time.Minute), dlock.DefaultTTL); err != nil {
		s.t.Errorf("the new holder's Extend after a stale release: %v", err)
	}
	s.unlock(l)
}

func (s *suite) renewal() {
	name := s.name("n")
	ttl := s.cfg.ttl
	a, b := s.client(dlock.TTL(ttl)), s.client()
	l := s.lock(a.Mutex(name))
	first := l.Deadline()
	end := time.Now().Add(5*ttl + ttl/2)
	for time.Now().Before(end) {
		if err := l.Err(); err != nil {
			s.t.Fatalf("lease lost while renewing: %v", err)
		}
		s.mustBeHeld(b, name)
		time.Sleep(ttl / 4)
	}
	if !l.Deadline().After(first.Add(4 * ttl)) {
		s.t.Errorf("after 5.5 TTLs the deadline moved from %v to %v only", first, l.Deadline())
	}
	dl, ok := l.Context().Deadline()
	if !ok || dl.After(l.Deadline()) {
		s.t.Errorf("Context().Deadline() = %v, %v; want at most %v", dl, ok, l.Deadline())
	}
	s.unlock(l)
}

func (s *suite) maxHold() {
	name := s.name("m")
	ttl := s.cfg.ttl
	a, b := s.client(), s.client()
	l := s.lock(a.Mutex(name, dlock.TTL(ttl), dlock.MaxHold(2*ttl)))
	start := time.Now()
	select {
	case <-l.Done():
	case <-time.After(2*ttl + 10*time.Second):
		s.t.Fatalf("lease not over %v after a MaxHold of %v", time.Since(start), 2*ttl)
	}
	if held := time.Since(start); held < 2*ttl-ttl/2 {
		s.t.Errorf("lease with MaxHold %v ended after %v", 2*ttl, held)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Err() after MaxHold = %v, want ErrLeaseLost", err)
	}
	// The lock frees: released at MaxHold, or at worst expired one TTL later.
	l2 := s.lock(b.Mutex(name))
	if l2.Token() <= l.Token() {
		s.t.Errorf("token after MaxHold %d is not above %d", l2.Token(), l.Token())
	}
	s.unlock(l2)
	if err := l.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Unlock after MaxHold: %v, want ErrLeaseLost", err)
	}
}

func (s *suite) reentrantOwner() {
	name := s.name("o")
	owner := "dlocktest-owner-" + randHex(4)
	a, a2, b := s.client(), s.client(), s.client()
	outer := s.lock(a.Mutex(name, dlock.Owner(owner)))
	if outer.Owner() != owner || outer.Holds() != 1 {
		s.t.Fatalf("outer lease: owner %q holds %d, want %q and 1", outer.Owner(), outer.Holds(), owner)
	}
	// The same owner through another client (another process) re-enters.
	inner, err := a2.Mutex(name, dlock.Owner(owner)).TryLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("reentrant TryLock: %v", err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 {
		s.t.Fatalf("reentrant lease: token %d holds %d, want token %d holds 2", inner.Token(), inner.Holds(), outer.Token())
	}
	inner2 := s.lock(a.Mutex(name, dlock.Owner(owner)))
	if inner2.Token() != outer.Token() || inner2.Holds() != 3 {
		s.t.Fatalf("second reentrant lease: token %d holds %d, want token %d holds 3", inner2.Token(), inner2.Holds(), outer.Token())
	}
	s.mustBeHeld(b, name)
	s.unlock(inner2)
	s.mustBeHeld(b, name)
	s.unlock(inner)
	s.mustBeHeld(b, name)
	s.unlock(outer)
	l, err := b.Mutex(name).TryLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("TryLock after all reentrant holds were released: %v", err)
	}
	if l.Token() <= outer.Token() {
		s.t.Errorf("token %d after release is not above %d", l.Token(), outer.Token())
	}
	s.unlock(l)
}

func (s *suite) reentrantContext() {
	name := s.name("c")
	a, b := s.client(), s.client()
	m := a.Mutex(name)
	outer := s.lock(m)
	ctx := dlock.WithLease(s.ctx(time.Minute), outer)
	inner, err := m.Lock(ctx)
	if err != nil {
		s.t.Fatalf("Lock with the outer lease in the context: %v", err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 || inner.Owner() != outer.Owner() {
		s.t.Fatalf("reentrant lease: token %d holds %d owner %q, want token %d holds 2 owner %q",
			inner.Token(), inner.Holds(), inner.Owner(), outer.Token(), outer.Owner())
	}
	// Without the context, the same Mutex does not re-enter.
	if l, err := m.TryLock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l.Unlock(context.Background())
		}
		s.t.Fatalf("TryLock without the lease in the context: %v, want ErrNotAcquired", err)
	}
	// A lease of another name in the context changes nothing.
	other := s.lock(a.Mutex(s.name("c-other")))
	if l, err := m.TryLock(dlock.WithLease(s.ctx(time.Minute), other)); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l.Unlock(context.Background())
		}
		s.t.Fatalf("TryLock with another lock's lease in the context: %v, want ErrNotAcquired", err)
	}
	s.unlock(other)
	s.unlock(inner)
	s.mustBeHeld(b, name)
	s.unlock(outer)
	l, err := b.Mutex(name).TryLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("TryLock after both holds were released: %v", err)
	}
	s.unlock(l)
	// A lost or released outer lease does not let anyone re-enter.
	if _, err := m.Lock(dlock.WithLease(s.ctx(time.Minute), outer)); !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Fatalf("Lock with a released lease in the context: %v, want an error", err)
	}
}

// waitFor starts Lock on m in a goroutine and returns once the backend has
// registered it as a waiter (its Acquire returned a Waiter), with a channel
// for its result. c must come from waiterClient.
func (s *suite) waitFor(c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) <-chan lockResult {
	s.t.Helper()
	res, err := startWaiting(c, name, ctx, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

func (s *suite) fairFIFO() {
	const waiters = 8
	name := s.name("f")
	h := s.client()
	holder := s.lock(h.Mutex(name, dlock.Fair()))
	var (
		mu    sync.Mutex
		order []int
	)
	results := make([]<-chan lockResult, waiters)
	for i := range waiters {
		results[i] = s.waitFor(s.waiterClient(), name, s.ctx(time.Minute), dlock.Fair())
	}
	var wg sync.WaitGroup
	for i, ch := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := <-ch
			if r.err != nil {
				s.t.Errorf("waiter %d: %v", i, r.err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := r.l.Unlock(context.Background()); err != nil {
				s.t.Errorf("waiter %d unlock: %v", i, err)
			}
		}()
	}
	s.unlock(holder)
	wg.Wait()
	for i, w := range order {
		if i != w {
			s.t.Fatalf("grant order %v, want arrival order 0..%d", order, waiters-1)
		}
	}
}

func (s *suite) tryLockWhileHeld() {
	name := s.name("try")
	a, b := s.client(), s.client()
	l := s.lock(a.Mutex(name))
	ctx := s.ctx(time.Minute)
	_, err := b.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		s.t.Fatalf("TryLock while held: %v, want ErrNotAcquired", err)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		s.t.Fatalf("TryLock waited for its context to end: %v", err)
	}
	var held *dlock.HeldError
	if errors.As(err, &held) && held.Holder.Owner != l.Owner() {
		s.t.Errorf("TryLock says the holder is %q, want %q", held.Holder.Owner, l.Owner())
	}
	s.unlock(l)
	l2, err := b.Mutex(name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock after release: %v", err)
	}
	s.unlock(l2)
}

// cancelledWaiter checks that a waiter that gives up leaves nothing behind:
// a later waiter gets the lock as soon as it is released, though the holder's
// TTL (a minute) and any leftover state's timeout would make it wait long.
func (s *suite) cancelledWaiter()     { s.cancelled(false) }
func (s *suite) cancelledFairWaiter() { s.cancelled(true) }

func (s *suite) cancelled(fair bool) {
	name := s.name("cw")
	var opts []dlock.Option
	if fair {
		opts = append(opts, dlock.Fair())
	}
	a, b, c := s.client(dlock.TTL(time.Minute)), s.waiterClient(), s.waiterClient()
	holder := s.lock(a.Mutex(name, opts...))
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := s.waitFor(b, name, ctx, opts...)
	later := s.waitFor(c, name, s.ctx(time.Minute), opts...)
	cancel()
	r := <-gaveUp
	if !errors.Is(r.err, dlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		s.t.Fatalf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", r.err)
	}
	if in, ok := a.Backend().(dlock.Inspector); ok && fair {
		infos, err := in.Inspect(s.ctx(time.Minute), name)
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		for _, info := range infos {
			if info.Name == name && info.Waiters > 1 {
				s.t.Errorf("after one of two waiters gave up, Inspect shows %d waiters", info.Waiters)
			}
		}
	}
	s.unlock(holder)
	select {
	case r := <-later:
		if r.err != nil {
			s.t.Fatalf("later waiter: %v", r.err)
		}
		if r.l.Token() <= holder.Token() {
			s.t.Errorf("later waiter's token %d is not above %d", r.l.Token(), holder.Token())
		}
		s.unlock(r.l)
	case <-time.After(20 * time.Second):
		s.t.Fatalf("the waiter after a cancelled one was not granted within 20s of the release")
	}
}

func (s *suite) invalidInput() {
	c := s.client()
	ctx := s.ctx(time.Minute)
	long := make([]byte, dlock.MaxNameLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, name := range []string{"", string(long), "bad\xffutf8", "nul\x00byte"} {
		for op, try := range map[string]func(*dlock.Mutex) (*dlock.Lease, error){
			"Lock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.Lock(ctx) }, "TryLock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.TryLock(ctx) },
		} {
			l, err := try(c.Mutex(name))
			if !errors.Is(err, dlock.ErrInvalidName) || l != nil {
				s.t.Errorf("%s(%q) = %v, %v; want ErrInvalidName", op, name, l, err)
			}
		}
	}
	// The longest name, and names with what stores treat specially, work.
	for _, name := range []string{s.prefix + string(long[len(s.prefix)+1:]), s.name("a/b/../c d"), s.name("ünï/cödé 🔒"), s.name("%2F:*?[]{}\\'\"")} {
		l, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			s.t.Errorf("TryLock(%q): %v", name, err)
			continue
		}
		if l.Name() != name {
			s.t.Errorf("lease name %q, want %q", l.Name(), name)
		}
		s.unlock(l)
	}
	name := s.name("opts")
	for what, opts := range map[string][]dlock.Option{
		"zero TTL":            {dlock.TTL(0)},
		"negative TTL":        {dlock.TTL(-time.Second)},
		"TTL below MinTTL":    {dlock.TTL(dlock.MinTTL - 1)},
		"MaxHold below TTL":   {dlock.TTL(time.Second), dlock.MaxHold(time.Second / 2)},
		"negative MaxHold":    {dlock.MaxHold(-time.Second)},
		"empty Owner":         {dlock.Owner("")},
		"client-only option":  {dlock.Drift(0.1)},
		"invalid UTF-8 owner": {dlock.Owner("\xff")},
		"NUL in Owner":        {dlock.Owner("a\x00b")},
		"Owner too long":      {dlock.Owner(string(long))},
	} {
		l, err := c.Mutex(name, opts...).TryLock(ctx)
		if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
			s.t.Errorf("%s: TryLock = %v, %v; want ErrInvalidOption", what, l, err)
		}
	}
	// Nothing was acquired by the refused calls.
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock after refused calls: %v", err)
	}
	s.unlock(l)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("second Unlock: %v, want ErrUnlocked", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("Err() after Unlock: %v, want ErrUnlocked", err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("Extend after Unlock: %v, want ErrUnlocked", err)
	}
	nb := s.f(s.t)
	defer nb.Close()
	if _, err := dlock.New(nb, dlock.Owner("x")); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("New with a Mutex-only option: %v, want ErrInvalidOption", err)
	}
}

func (s *suite) manyNames() {
	n := s.cfg.names
	a, b := s.client(), s.client()
	leases := make([]*dlock.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l, err := a.Mutex(s.name(fmt.Sprintf("many/%04d", i))).TryLock(s.ctx(time.Minute))
			if err != nil {
				errs <- err
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("TryLock of a free name: %v", err)
	}
	for i := 0; i < n; i += n / 10 {
		s.mustBeHeld(b, leases[i].Name())
	}
	if in, ok := a.Backend().(dlock.Inspector); ok {
		infos, err := in.Inspect(s.ctx(time.Minute), s.name("many/"))
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		if len(infos) != n {
			s.t.Errorf("Inspect lists %d held locks, want %d", len(infos), n)
		}
	}
	errs = make(chan error, n)
	for _, l := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := l.Unlock(s.ctx(time.Minute)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("Unlock: %v", err)
	}
	if in, ok := a.Backend().(dlock.Inspector); ok {
		infos, err := in.Inspect(s.ctx(time.Minute), s.name("many/"))
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		if len(infos) != 0 {
			s.t.Errorf("after releasing all, Inspect lists %d held locks, e.g. %+v", len(infos), infos[0])
		}
	}
	for i := 0; i < n; i += n / 10 {
		l, err := b.Mutex(leases[i].Name()).TryLock(s.ctx(time.Minute))
		if err != nil {
			s.t.Fatalf("TryLock after release: %v", err)
		}
		s.unlock(l)
	}
}

func (s *suite) closeWithLocksHeld() {
	a, b := s.waiterClient(), s.client()
	var held []*dlock.Lease
	for i := range 3 {
		held = append(held, s.lock(a.Mutex(s.name(fmt.Sprint("held", i)))))
	}
	// A waiter of client a, on a lock held by b.
	bl := s.lock(b.Mutex(s.name("busy")))
	waiting := s.waitFor(a, s.name("busy"), s.ctx(time.Minute))
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if r := <-waiting; !errors.Is(r.err, dlock.ErrClosed) {
		s.t.Errorf("Lock waiting during Close: %v, want ErrClosed", r.err)
	}
	for _, l := range held {
		select {
		case <-l.Done():
		default:
			s.t.Errorf("lease %q not Done after Close", l.Name())
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrClosed) {
			s.t.Errorf("lease Err() after Close = %v, want ErrLeaseLost and ErrClosed", err)
		}
		// Close released it: another client takes it at once.
		l2, err := b.Mutex(l.Name()).TryLock(s.ctx(time.Minute))
		if err != nil {
			s.t.Errorf("TryLock after the holder's client closed: %v", err)
			continue
		}
		s.unlock(l2)
		if err := l.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrClosed) {
			s.t.Errorf("Unlock after Close: %v, want ErrClosed", err)
		}
	}
	if _, err := a.Mutex(s.name("after")).Lock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrClosed) {
		s.t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); !errors.Is(err, dlock.ErrClosed) {
		s.t.Errorf("second Close: %v, want ErrClosed", err)
	}
	s.unlock(bl)
}

func (s *suite) extend() {
	name := s.name("ext")
	ttl := s.cfg.ttl
	cb := &crashable{Backend: s.f(s.t)}
	a, b := s.clientOn(cb, dlock.TTL(ttl)), s.client()
	l := s.lock(a.Mutex(name))
	before := l.Deadline()
	if err := l.Extend(s.ctx(time.Minute), 10*ttl); err != nil {
		s.t.Fatalf("Extend: %v", err)
	}
	if !l.Deadline().After(before.Add(5 * ttl)) {
		s.t.Errorf("Extend(%v) moved the deadline from %v to %v", 10*ttl, before, l.Deadline())
	}
	// With background renewals failing from now on, the lock is held for
	// the extended TTL, not the original one.
	cb.noRenew.Store(true)
	time.Sleep(3 * ttl)
	s.mustBeHeld(b, name)
	if err := l.Err(); err != nil {
		s.t.Errorf("lease lost within its extended TTL: %v", err)
	}
	if err := l.Extend(s.ctx(time.Minute), 0); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Extend(0): %v, want ErrInvalidOption", err)
	}
	s.unlock(l)
}

// inspectWaiters checks that an Inspector reports the waiters it has, fair
// and not fair, or -1 when it cannot tell: never a count that leaves some
// out (dlock status showed 0 while two dlock run waited).
func (s *suite) inspectWaiters() {
	if _, ok := s.client().Backend().(dlock.Inspector); !ok {
		s.t.Skip("the backend is not an Inspector")
	}
	for _, fair := range []bool{false, true} {
		var opts []dlock.Option
		if fair {
			opts = append(opts, dlock.Fair())
		}
		name := s.name(fmt.Sprintf("iw-fair-%v", fair))
		a := s.client(dlock.TTL(time.Minute))
		holder := s.lock(a.Mutex(name, opts...))
		s.checkWaiters(a, name, fair, 0)
		ctx, cancel := context.WithCancel(context.Background())
		w1 := s.waitFor(s.waiterClient(), name, ctx, opts...)
		w2 := s.waitFor(s.waiterClient(), name, ctx, opts...)
		s.checkWaiters(a, name, fair, 2)
		cancel()
		for _, w := range []<-chan lockResult{w1, w2} {
			if r := <-w; r.err == nil {
				s.unlock(r.l)
				s.t.Fatalf("fair=%v: a waiter was granted while the lock was held", fair)
			}
		}
		s.unlock(holder)
	}
}

// checkWaiters checks that Inspect reports want waiters on the held lock
// name, or -1.
func (s *suite) checkWaiters(c *dlock.Client, name string, fair bool, want int) {
	s.t.Helper()
	infos, err := c.Backend().(dlock.Inspector).Inspect(s.ctx(time.Minute), name)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	for _, in := range infos {
		if in.Name == name {
			if in.Waiters != want && in.Waiters != -1 {
				s.t.Errorf("fair=%v: Inspect shows %d waiters with %d waiting, want %d or -1 (unknown)", fair, in.Waiters, want, want)
			}
			return
		}
	}
	s.t.Fatalf("Inspect does not list the held lock %q: %+v", name, infos)
}
