package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// scanKeys returns the keys matching pattern, on every master of a
// Cluster.
func scanKeys(ctx context.Context, rdb goredis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *goredis.Client) error {
		ks, err := scanAll(ctx, c, pattern)
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	}
	if cl, ok := rdb.(*goredis.ClusterClient); ok {
		err := cl.ForEachMaster(ctx, scan)
		return out, err
	}
	return out, scan(ctx, rdb.(*goredis.Client))
}

func scanAll(ctx context.Context, c *goredis.Client, pattern string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return out, err
		}
		out = append(out, ks...)
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// namePattern is the SCAN pattern of every key of the locks whose names
// start with prefix (hash, queue, timeouts), under the key prefix kp.
func namePattern(kp, prefix string) string {
	return strings.TrimSuffix(dredis.LockKey(kp, prefix), "}") + "*"
}

// reclaimHook is the suite's count hook: the keys of the names under a
// prefix, through a client from connect for each call (see foreignHook).
// Redis needs no reclaim hook: a release deletes the hash, and an
// abandoned one expires by itself.
func reclaimHook(connect func() goredis.UniversalClient, kp string) dlocktest.Option {
	return dlocktest.Reclaim(nil, func(ctx context.Context, prefix string) (int, error) {
		rdb := connect()
		defer rdb.Close()
		ks, err := scanKeys(ctx, rdb, namePattern(kp, prefix))
		return len(ks), err
	})
}

// dlockKeys counts the keys under the key prefix kp: lock keys and fence
// keys.
func dlockKeys(t testing.TB, rdb goredis.UniversalClient, kp string) (locks, fences []string) {
	t.Helper()
	all, err := scanKeys(context.Background(), rdb, kp+":*")
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	for _, k := range all {
		if strings.HasPrefix(k, kp+":fence") {
			fences = append(fences, k)
		} else {
			locks = append(locks, k)
		}
	}
	return locks, fences
}

// waitKeys waits (loosely bounded) until no lock key is left under kp,
// and fails with what is left.
func waitKeys(t testing.TB, rdb goredis.UniversalClient, kp string, bound time.Duration) {
	t.Helper()
	dlocktest.WaitFor(t, bound, func() error {
		if locks, _ := dlockKeys(t, rdb, kp); len(locks) > 0 {
			return fmt.Errorf("%d lock keys are still there after they were free (first: %v)", len(locks), locks[:min(len(locks), 5)])
		}
		return nil
	})
}

// testReclaimScale is the measured-state test: 10,000 distinct names locked
// and released leave no lock key and at most maxFences fence keys; holders
// and fair waiters that vanish without a word leave nothing once their
// lease and waiter timeout are over.
func testReclaimScale(t *testing.T, rdb goredis.UniversalClient, newB func(opts ...dredis.Option) *dredis.Backend, maxFences int) {
	const kp = "dlock"
	c := newDlock(t, newB())
	dlocktest.Churn(t, ctxFor(t, 5*time.Minute), c, "scale/", 10_000, false)
	locks, fences := dlockKeys(t, rdb, kp)
	if len(locks) != 0 || len(fences) > maxFences {
		t.Fatalf("after 10,000 names were locked and released: %d lock keys (want 0; first %v) and %d fence keys (want at most %d)",
			len(locks), locks[:min(len(locks), 5)], len(fences), maxFences)
	}
	t.Logf("10,000 names locked and released: %d lock keys, %d fence keys", len(locks), len(fences))
	dlocktest.Churn(t, ctxFor(t, 5*time.Minute), c, "scale-fair/", 2000, true)
	if locks, _ := dlockKeys(t, rdb, kp); len(locks) != 0 {
		t.Fatalf("after 2,000 fair names were locked and released: %d lock keys (first %v)", len(locks), locks[:min(len(locks), 5)])
	}

	// Holders that were killed: grants through the backend itself, never
	// renewed nor released.
	ctx := ctxFor(t, time.Minute)
	// Long enough that the 1,050 holds are all still there when counted,
	// also on a loaded machine (300 ms was not, on a Cluster in CI).
	const ttl = 4 * time.Second
	wt := dredis.MinWaiterTimeout
	dead := newB(dredis.WaiterTimeout(wt))
	start := time.Now()
	for i := range 1000 {
		if _, _, err := dead.Acquire(ctx, dlock.Request{Name: fmt.Sprintf("killed/%d", i), Owner: "dead", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	// Fair waiters that died while queued behind a dead holder, and
	// waiters (fair and not) that gave up.
	for i := range 50 {
		name := fmt.Sprintf("queued/%d", i)
		if _, _, err := dead.Acquire(ctx, dlock.Request{Name: name, Owner: "dead", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			_, w, err := dead.Acquire(ctx, dlock.Request{Name: name, Owner: fmt.Sprintf("waiter-%d", j), TTL: ttl, Fair: j != 2, Wait: true})
			if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
				t.Fatalf("waiter %d on a held lock: %v, %v", j, w, err)
			}
			if j == 1 {
				if err := w.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if locks, _ := dlockKeys(t, rdb, kp); len(locks) < 1000 {
		t.Fatalf("only %d lock keys while 1,050 locks are held (%v after the first grant, TTL %v)", len(locks), time.Since(start).Round(time.Millisecond), ttl)
	}
	// The bound: the lease, plus the waiter timeout (the last deadline of a
	// fair waiter or of a waiter's hint) and a second (the queue's grace),
	// with slack for a busy machine.
	waitKeys(t, rdb, kp, ttl+wt+time.Second+10*time.Second)
	if _, fences := dlockKeys(t, rdb, kp); len(fences) > maxFences {
		t.Fatalf("%d fence keys, want at most %d", len(fences), maxFences)
	}
	dead.Close()
}

func TestReclaimScale(t *testing.T) {
	srv := testserver.Redis(t)
	rdb := newClient(t, srv.Addr())
	// One fence key per slot, as on a Cluster (and as redlock keeps them).
	testReclaimScale(t, rdb, func(opts ...dredis.Option) *dredis.Backend { return newBackend(t, srv.Addr(), opts...) }, 16384)
}

func TestClusterReclaimScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Redis Cluster")
	}
	cl := testserver.RedisCluster(t, 3)
	connect := func() *goredis.ClusterClient {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	}
	rdb := connect()
	t.Cleanup(func() { rdb.Close() })
	testReclaimScale(t, rdb, func(opts ...dredis.Option) *dredis.Backend {
		c := connect()
		b, err := dredis.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(); c.Close() })
		return b
	}, 16384)
}

// TestReclaimTokensAcrossDeletion: a name whose hash was deleted (by its
// release, or by its expiry) gets a token above the last one, also when
// the server's clock gives nothing to go by: the fence key set far ahead
// of the clock stands for tokens granted before a clock step back.
func TestReclaimTokensAcrossDeletion(t *testing.T) {
	srv := testserver.Redis(t)
	rdb := newClient(t, srv.Addr())
	c := newDlock(t, newBackend(t, srv.Addr()))
	ctx := ctxFor(t, time.Minute)
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	// A grant an hour ahead of the clock, as if the clock had stepped back.
	if err := rdb.Set(ctx, dredis.FenceKey("dlock", "n"), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Token()
	if first <= ahead {
		t.Fatalf("token %d is not above the fence %d", first, ahead)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, dredis.LockKey("dlock", "n")).Result(); n != 0 {
		t.Fatalf("the hash of a released lock is still there")
	}
	l, err = c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if l.Token() <= first {
		t.Fatalf("token %d after the hash was deleted is not above %d", l.Token(), first)
	}
}

// TestReclaimKeepsForeignData: keys under the prefix that dlock did not
// write stay, and a fence key with foreign data is reported, not
// overwritten.
func TestReclaimKeepsForeignData(t *testing.T) {
	srv := testserver.Redis(t)
	rdb := newClient(t, srv.Addr())
	c := newDlock(t, newBackend(t, srv.Addr()))
	ctx := ctxFor(t, time.Minute)
	if err := rdb.Set(ctx, dredis.FenceKey("dlock", "n"), "not-a-token", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Mutex("n").TryLock(ctx)
	if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), `"n"`) {
		t.Fatalf("TryLock with foreign data at the fence key: %v, want ErrForeignData naming the lock", err)
	}
	if v, _ := rdb.Get(ctx, dredis.FenceKey("dlock", "n")).Result(); v != "not-a-token" {
		t.Fatalf("the foreign fence key now holds %q", v)
	}
	if err := rdb.Del(ctx, dredis.FenceKey("dlock", "n")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "dlock:other", "mine", 0).Err(); err != nil {
		t.Fatal(err)
	}
	dlocktest.Churn(t, ctx, c, "x/", 100, false)
	if v, _ := rdb.Get(ctx, "dlock:other").Result(); v != "mine" {
		t.Fatalf("a key that is not dlock's was changed: %q", v)
	}
}

// TestReclaimProcesses runs 3 OS processes (this test binary again) that
// lock and release one shared name and 200 shared names, all at once,
// checking on the server that no two hold a name at once and that each
// name's tokens increase; then, once the waiters' hints are over, nothing
// is left but fence keys, at most one per slot of the names used.
func TestReclaimProcesses(t *testing.T) {
	if addr := os.Getenv("DLOCK_RECLAIM_CHILD"); addr != "" {
		reclaimChild(t, addr)
		return
	}
	srv := testserver.Redis(t)
	rdb := newClient(t, srv.Addr())
	var wg sync.WaitGroup
	outs := make([][]byte, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestReclaimProcesses$", "-test.count=1")
			cmd.Env = append(os.Environ(), "DLOCK_RECLAIM_CHILD="+srv.Addr())
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil || !strings.Contains(string(outs[i]), "PASS") {
			t.Errorf("process %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	// Names that had waiters keep their hash until the waiters' hint ends:
	// the lease they waited on plus the waiter timeout after their last
	// attempt; and the queue's second of grace.
	waitKeys(t, rdb, "dlock", childTTL+dredis.MinWaiterTimeout+time.Second+10*time.Second)
	if _, fences := dlockKeys(t, rdb, "dlock"); len(fences) > 201 {
		t.Errorf("after the processes: %d fence keys; want at most one per name's slot (201 names)", len(fences))
	}
}

// checkScript records a grant on the server, under keys outside dlock's
// prefix: it fails if the name is held by another checker or if the
// token is not above the name's last one.
var checkScript = goredis.NewScript(`
if redis.call('INCR', KEYS[1]) ~= 1 then return redis.error_reply('two holders at once') end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= last then return redis.error_reply('token ' .. ARGV[1] .. ' after ' .. last) end
redis.call('SET', KEYS[2], ARGV[1])
return 1
`)

// childTTL is the TTL of TestReclaimProcesses's locks.
const childTTL = 2 * time.Second

func reclaimChild(t *testing.T, addr string) {
	rdb := newClient(t, addr)
	c := newDlock(t, newBackend(t, addr, dredis.WaiterTimeout(dredis.MinWaiterTimeout)), dlock.TTL(childTTL))
	ctx := ctxFor(t, 3*time.Minute)
	hold := func(name string, fair bool) error {
		var opts []dlock.Option
		if fair {
			opts = append(opts, dlock.Fair())
		}
		l, err := c.Mutex(name, opts...).Lock(ctx)
		if err != nil {
			return err
		}
		if err := checkScript.Run(ctx, rdb, []string{"check:busy:" + name, "check:tok:" + name}, l.Token()).Err(); err != nil {
			l.Unlock(ctx)
			return fmt.Errorf("%s: %w", name, err)
		}
		rdb.Decr(ctx, "check:busy:"+name)
		return l.Unlock(ctx)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				// One name shared by all (fair on odd goroutines), and
				// names shared by the processes but not the goroutines.
				if err := hold("one", g%2 == 1); err != nil {
					errs <- err
					return
				}
				if err := hold(fmt.Sprintf("many/%d/%d", g, i%50), false); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
