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

// NoLeakCheck turns off the goroutine-leak check that follows every
// subtest, for backends whose client library keeps goroutines that
// outlive their closing (say why where you use it).
func NoLeakCheck() Option { return optionFunc(func(c *config) { c.leakCheck = false }) }

// Run runs the conformance suite against the backends made by newBackend.
func Run(t *testing.T, newBackend Factory, opts ...Option) {
	cfg := config{ttl: 500 * time.Millisecond, watchdog: 2 * time.Minute, grants: 200, names: 1000, leakCheck: true}
	for _, o := range opts {
		o.apply(&cfg)
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
		{"MinHold", (*suite).minHold},
		{"LostShorterExtend", (*suite).lostShorterExtend},
		{"LeaseContextTimeout", (*suite).leaseContextTimeout},
		{"SilentStoreNotBusy", (*suite).silentStoreNotBusy},
		{"StoreDownWhileWaiting", (*suite).storeDownWhileWaiting},
		{"SemaphoreLimit", (*suite).semaphoreLimit},
		{"SemaphorePermitExpiry", (*suite).permitExpiry},
		{"SemaphoreQueue", (*suite).weightedQueue},
		{"WeightedInput", (*suite).weightedInput},
		{"RWExclusion", (*suite).rwExclusion},
		{"RWTokens", (*suite).weightedTokens},
		{"RWWriterNotStarved", (*suite).writerNotStarved},
		{"RWDowngrade", (*suite).downgrade},
		{"ElectionOneLeader", (*suite).electionOneLeader},
		{"ElectionObserve", (*suite).electionObserve},
		{"ElectionLeaderLost", (*suite).electionLeaderLost},
		{"ElectionInput", (*suite).electionInput},
		{"WatchHolders", (*suite).watchHolders},
	} {
		t.Run(tc.name, func(t *testing.T) { runItem(t, newBackend, cfg, tc.name, tc.fn, dlock.KindMutex) })
	}
	// The mutex items again through a Semaphore of 1 and an RWMutex's
	// writer: each backend's weighted path must behave as its mutex.
	for _, via := range []dlock.Kind{dlock.KindSemaphore, dlock.KindRWMutex} {
		for _, tc := range []struct {
			name string
			fn   func(*suite)
		}{
			{"Exclusion", (*suite).exclusion},
			{"TokensIncrease", (*suite).tokensIncrease},
			{"ExpiryAfterAbandon", (*suite).expiryAfterAbandon},
			{"ReleaseAfterLoss", (*suite).releaseAfterLoss},
			{"Renewal", (*suite).renewal},
			{"ReentrantOwner", (*suite).reentrantOwner},
			{"ReentrantContext", (*suite).reentrantContext},
			{"TryLockWhileHeld", (*suite).tryLockWhileHeld},
			{"CancelledWaiter", (*suite).cancelledWaiter},
		} {
			name := "Via" + map[dlock.Kind]string{dlock.KindSemaphore: "Semaphore1", dlock.KindRWMutex: "RWWriter"}[via] + "/" + tc.name
			// The weighted path under the mutex's items: its wiring, not
			// the load, so fewer grants (MySQL wakes weighted waiters of
			// other processes by looking again, not by push).
			vcfg := cfg
			vcfg.grants = min(cfg.grants, 25)
			t.Run(name, func(t *testing.T) {
				runItem(t, newBackend, vcfg, name, func(s *suite) {
					s.grants(via)
					tc.fn(s)
				}, via)
			})
		}
	}
}

// runItem runs one item with the leak check and the watchdog.
func runItem(t *testing.T, newBackend Factory, cfg config, name string, fn func(*suite), via dlock.Kind) {
	if cfg.leakCheck {
		// Registered first, so it runs after every other clean-up of
		// the subtest, the factory's included.
		ignore := goleak.IgnoreCurrent()
		t.Cleanup(func() {
			if !t.Failed() {
				// A driver's connection goroutines end a little
				// after the pool's Close; on a loaded machine that
				// took longer than goleak's own ~2 s of retries (a
				// go-sql-driver watcher, in CI): allow ~10 s.
				for end := time.Now().Add(8 * time.Second); goleak.Find(ignore) != nil && time.Now().Before(end); {
					time.Sleep(100 * time.Millisecond)
				}
				goleak.VerifyNone(t, ignore)
			}
		})
	}
	stop := watchdog(t, cfg.watchdog)
	defer stop()
	fn(&suite{t: t, f: newBackend, cfg: cfg, prefix: "dlocktest/" + randHex(6) + "/" + name + "/", via: via})
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
