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
type Option interface{ apply(*config) }

// optionFunc is an Option that runs itself.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	ttl       time.Duration
	watchdog  time.Duration
	grants    int
	names     int
	leakCheck bool
	parallel  int           // items run at once
	foreign   *foreignHooks // see PlantForeign
	reclaim   *reclaimHooks // see Reclaim
}

// ShortTTL sets the TTL of the items that wait for an expiry (default
// 500ms). Backends whose store counts in coarse units use more (etcd: 2s).
func ShortTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.ttl = d }) }

// Watchdog sets how long one subtest may run before the suite ends the test
// binary with a goroutine dump (default 2 minutes).
func Watchdog(d time.Duration) Option { return optionFunc(func(c *config) { c.watchdog = d }) }

// Grants sets how many grants each of the 16 goroutines of the exclusion
// item makes (default 200).
func Grants(n int) Option { return optionFunc(func(c *config) { c.grants = n }) }

// Names sets how many distinct names the many-names item holds at once
// (default 1000), for backends where every held lock costs a scarce
// resource — a database connection in the SQL backends' session mode.
// n is at least 10.
func Names(n int) Option { return optionFunc(func(c *config) { c.names = max(n, 10) }) }

// NoLeakCheck turns off the goroutine-leak check that follows the
// suite, for backends whose client library keeps goroutines that
// outlive their closing (say why where you use it).
func NoLeakCheck() Option { return optionFunc(func(c *config) { c.leakCheck = false }) }

// Parallel sets how many items of the suite run at once (default 4), a
// bound that keeps a small server from being swamped; 1 runs them one by
// one. See [Run].
func Parallel(n int) Option { return optionFunc(func(c *config) { c.parallel = max(n, 1) }) }

// item is one item of the suite, as Run runs it.
type item struct {
	name string
	fn   func(*suite)
	cfg  config
	via  dlock.Kind
	// serial: the item runs alone, with no other item of the Run beside
	// it (see Run).
	serial bool
}

// Run runs the conformance suite against the backends made by newBackend,
// each item as a subtest of t named after it.
//
// Most items run side by side, at most [Parallel] at once: each locks
// names of its own (under a prefix unique to the item) on backends of its
// own, so the others are no more to it than other processes using the
// store. An item runs alone (serial) when it cannot share the store:
//   - it counts what happens at the store over a time (WokenNotPolling
//     counts a waiter's acquisition attempts: a backend may wake its
//     waiters at other names' releases);
//   - it takes a scarce resource in bulk (ManyNames holds up to 1000
//     names, each a database connection in a session mode);
//   - it acts on the whole store (ReclaimKeepsTokens sweeps every free
//     name);
//   - it needs short-TTL renewals to keep pace with the clock (Renewal,
//     LeaseContextTimeout: a late renewal under the other items' load would
//     fail them for no fault of the backend).
//
// Items that only wait for a TTL, or check that something does not happen
// within a time, run side by side. The serial items run first, one by one,
// then the others.
//
// Unless [NoLeakCheck] is given, Run checks once all its items are over
// that no goroutine started during the Run is left (skipped if an item
// failed).
func Run(t *testing.T, newBackend Factory, opts ...Option) {
	cfg := config{ttl: 500 * time.Millisecond, watchdog: 2 * time.Minute, grants: 200, names: 1000, leakCheck: true, parallel: 4}
	for _, o := range opts {
		o.apply(&cfg)
	}
	var items []item
	for _, tc := range []struct {
		name   string
		fn     func(*suite)
		serial bool
	}{
		{"Exclusion", (*suite).exclusion, false},
		{"TokensIncrease", (*suite).tokensIncrease, false},
		{"ExpiryAfterAbandon", (*suite).expiryAfterAbandon, false},
		{"ReleaseAfterLoss", (*suite).releaseAfterLoss, false},
		{"Renewal", (*suite).renewal, true},
		{"MaxHold", (*suite).maxHold, false},
		{"ReentrantOwner", (*suite).reentrantOwner, false},
		{"ReentrantContext", (*suite).reentrantContext, false},
		{"FairFIFO", (*suite).fairFIFO, false},
		{"TryLockWhileHeld", (*suite).tryLockWhileHeld, false},
		{"CancelledWaiter", (*suite).cancelledWaiter, false},
		{"CancelledFairWaiter", (*suite).cancelledFairWaiter, false},
		{"InvalidInput", (*suite).invalidInput, false},
		{"ManyNames", (*suite).manyNames, true},
		{"CloseWithLocksHeld", (*suite).closeWithLocksHeld, false},
		{"Extend", (*suite).extend, false},
		{"ForeignData", (*suite).foreignData, false},
		{"ReclaimKeepsTokens", (*suite).reclaimKeepsTokens, true},
		{"InspectWaiters", (*suite).inspectWaiters, false},
		{"WokenNotPolling", (*suite).wokenNotPolling, true},
		{"ExtremeTTL", (*suite).extremeTTL, false},
		{"NamespaceIsolation", (*suite).namespaceIsolation, false},
		{"MinHold", (*suite).minHold, false},
		{"LostShorterExtend", (*suite).lostShorterExtend, false},
		{"LeaseContextTimeout", (*suite).leaseContextTimeout, true},
		{"SilentStoreNotBusy", (*suite).silentStoreNotBusy, false},
		{"StoreDownWhileWaiting", (*suite).storeDownWhileWaiting, false},
		{"SemaphoreLimit", (*suite).semaphoreLimit, false},
		{"SemaphorePermitExpiry", (*suite).permitExpiry, false},
		{"SemaphoreQueue", (*suite).weightedQueue, false},
		{"WeightedInput", (*suite).weightedInput, false},
		{"RWExclusion", (*suite).rwExclusion, false},
		{"RWTokens", (*suite).weightedTokens, false},
		{"RWWriterNotStarved", (*suite).writerNotStarved, false},
		{"RWDowngrade", (*suite).downgrade, false},
		{"ElectionOneLeader", (*suite).electionOneLeader, false},
		{"ElectionObserve", (*suite).electionObserve, false},
		{"ElectionLeaderLost", (*suite).electionLeaderLost, false},
		{"ElectionInput", (*suite).electionInput, false},
		{"WatchHolders", (*suite).watchHolders, false},
	} {
		items = append(items, item{name: tc.name, fn: tc.fn, cfg: cfg, via: dlock.KindMutex, serial: tc.serial})
	}
	// The mutex items again through a Semaphore of 1 and an RWMutex's
	// writer: each backend's weighted path must behave as its mutex.
	for _, via := range []dlock.Kind{dlock.KindSemaphore, dlock.KindRWMutex} {
		for _, tc := range []struct {
			name   string
			fn     func(*suite)
			serial bool
		}{
			{"Exclusion", (*suite).exclusion, false},
			{"TokensIncrease", (*suite).tokensIncrease, false},
			{"ExpiryAfterAbandon", (*suite).expiryAfterAbandon, false},
			{"ReleaseAfterLoss", (*suite).releaseAfterLoss, false},
			{"Renewal", (*suite).renewal, true},
			{"ReentrantOwner", (*suite).reentrantOwner, false},
			{"ReentrantContext", (*suite).reentrantContext, false},
			{"TryLockWhileHeld", (*suite).tryLockWhileHeld, false},
			{"CancelledWaiter", (*suite).cancelledWaiter, false},
		} {
			// The weighted path under the mutex's items: its wiring, not
			// the load, so fewer grants (MySQL wakes weighted waiters of
			// other processes by looking again, not by push).
			vcfg := cfg
			vcfg.grants = min(cfg.grants, 25)
			items = append(items, item{
				name: "Via" + map[dlock.Kind]string{dlock.KindSemaphore: "Semaphore1", dlock.KindRWMutex: "RWWriter"}[via] + "/" + tc.name,
				fn: func(s *suite) {
					s.grants(via)
					tc.fn(s)
				},
				cfg: vcfg, via: via, serial: tc.serial,
			})
		}
	}
	var ignore goleak.Option
	if cfg.leakCheck {
		ignore = goleak.IgnoreCurrent()
	}
	for _, it := range items {
		if it.serial {
			t.Run(it.name, func(t *testing.T) { runItem(t, newBackend, it) })
		}
	}
	// testing.T.Run may be called from several goroutines at once; unlike
	// t.Parallel, this keeps Run synchronous (it returns when the suite is
	// over, so the leak check below sees every item's clean-up done) and
	// the bound its own rather than -parallel's.
	sem := make(chan struct{}, cfg.parallel)
	var wg sync.WaitGroup
	for _, it := range items {
		if it.serial {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.Run(it.name, func(t *testing.T) { runItem(t, newBackend, it) })
		}()
	}
	wg.Wait()
	if cfg.leakCheck && !t.Failed() {
		// A driver's connection goroutines end a little after the
		// pool's Close; on a loaded machine that took longer than
		// goleak's own ~2 s of retries (a go-sql-driver watcher, in
		// CI): allow ~10 s.
		for end := time.Now().Add(8 * time.Second); goleak.Find(ignore) != nil && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
		if err := goleak.Find(ignore); err != nil {
			t.Errorf("goroutines started by the dlocktest.Run items are left after all of them ended: %v", err)
		}
	}
}

// runItem runs one item with the watchdog.
func runItem(t *testing.T, newBackend Factory, it item) {
	stop := watchdog(t, it.cfg.watchdog)
	defer stop()
	it.fn(&suite{t: t, f: newBackend, cfg: it.cfg, prefix: "dlocktest/" + randHex(6) + "/" + it.name + "/", via: it.via})
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
	via    dlock.Kind // what the mutex items lock through: KindMutex, a Semaphore(1), or an RWMutex's writer
}

// locker is what the mutex items lock: a Mutex, or the same through a
// Semaphore of 1 or the writer side of an RWMutex, which must behave
// alike.
type locker interface {
	Lock(ctx context.Context) (*dlock.Lease, error)
	TryLock(ctx context.Context) (*dlock.Lease, error)
	Name() string
}

type semLocker struct{ *dlock.Semaphore }

func (l semLocker) Lock(ctx context.Context) (*dlock.Lease, error)    { return l.Acquire(ctx) }
func (l semLocker) TryLock(ctx context.Context) (*dlock.Lease, error) { return l.TryAcquire(ctx) }

// mutex returns the lock called name on c, as the item group runs it.
func (s *suite) mutex(c *dlock.Client, name string, opts ...dlock.Option) locker {
	switch s.via {
	case dlock.KindSemaphore:
		return semLocker{c.Semaphore(name, 1, opts...)}
	case dlock.KindRWMutex:
		return c.RWMutex(name, opts...)
	}
	return c.Mutex(name, opts...)
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

func (s *suite) lock(m locker) *dlock.Lease {
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

// mustBeFree takes the lock with TryLock, which must succeed at once
// (when says after what, for the message), and returns the lease.
func (s *suite) mustBeFree(c *dlock.Client, name, when string) *dlock.Lease {
	s.t.Helper()
	l, err := s.mutex(c, name).TryLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("TryLock %s: %v", when, err)
	}
	return l
}

// mustBeHeld checks that another owner cannot take the lock now.
func (s *suite) mustBeHeld(c *dlock.Client, name string) {
	s.t.Helper()
	l, err := s.mutex(c, name).TryLock(s.ctx(time.Minute))
	if err == nil {
		l.Unlock(context.Background())
		s.t.Fatalf("TryLock(%q) by another owner succeeded; the lock should be held", name)
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		s.t.Fatalf("TryLock(%q): %v, want ErrNotAcquired", name, err)
	}
}

// forward gives the suite's backend wrappers the weighted grants of the
// backend they wrap: without CanGrant a Client grants mutexes only.
type forward struct{ b dlock.Backend }

func (f forward) CanGrant(kind dlock.Kind, limit int) error {
	if g, ok := f.b.(dlock.Granter); ok {
		return g.CanGrant(kind, limit)
	}
	return fmt.Errorf("%w: %s grants mutexes only", errors.ErrUnsupported, f.b)
}

func (f forward) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if d, ok := f.b.(dlock.Downgrader); ok {
		return d.Downgrade(ctx, h, weight)
	}
	return fmt.Errorf("%w: %s cannot downgrade", errors.ErrUnsupported, f.b)
}

func (c *crashable) CanGrant(kind dlock.Kind, limit int) error {
	return forward{c.Backend}.CanGrant(kind, limit)
}

func (c *crashable) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if c.crashed.Load() {
		return errCrashed
	}
	return forward{c.Backend}.Downgrade(ctx, h, weight)
}

func (o *observed) CanGrant(kind dlock.Kind, limit int) error {
	return forward{o.Backend}.CanGrant(kind, limit)
}

func (o *observed) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	return forward{o.Backend}.Downgrade(ctx, h, weight)
}
