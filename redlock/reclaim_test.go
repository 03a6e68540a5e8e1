package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// masterKeys returns the keys matching pattern on each master of g.
func masterKeys(ctx context.Context, g *testserver.RedisGroup, pattern string) ([][]string, error) {
	out := make([][]string, g.Len())
	for i, addr := range g.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				c.Close()
				return nil, err
			}
			out[i] = append(out[i], ks...)
			if cursor = next; cursor == 0 {
				break
			}
		}
		c.Close()
	}
	return out, nil
}

// reclaimHook counts, on the master that has most, the keys of the names
// under a prefix. Redlock needs no reclaim hook: a release deletes the
// hash, and an abandoned one expires by itself.
func reclaimHook(t *testing.T, g *testserver.RedisGroup) dlocktest.Option {
	b := open(t, g, "")
	return dlocktest.Reclaim(nil, func(ctx context.Context, prefix string) (int, error) {
		pattern := strings.TrimSuffix(redlock.LockKey(b, prefix), "}") + "*"
		keys, err := masterKeys(ctx, g, pattern)
		n := 0
		for _, ks := range keys {
			n = max(n, len(ks))
		}
		return n, err
	})
}

// lockKeysLeft returns, for each master, its keys under "dlock:" that are
// not fence keys, and how many fence keys it has.
func lockKeysLeft(t *testing.T, g *testserver.RedisGroup) (locks []string, fences int) {
	t.Helper()
	keys, err := masterKeys(context.Background(), g, "dlock:*")
	if err != nil {
		t.Fatal(err)
	}
	for _, ks := range keys {
		n := 0
		for _, k := range ks {
			if strings.HasPrefix(k, "dlock:fence:") {
				n++
			} else {
				locks = append(locks, k)
			}
		}
		fences = max(fences, n)
	}
	return locks, fences
}

// waitLocks waits (loosely bounded) until no master has a lock key left.
func waitLocks(t *testing.T, g *testserver.RedisGroup, bound time.Duration) {
	t.Helper()
	dlocktest.WaitFor(t, bound, func() error {
		if locks, _ := lockKeysLeft(t, g); len(locks) > 0 {
			return fmt.Errorf("%d lock keys are left after their names were free (first %v)", len(locks), locks[:min(len(locks), 5)])
		}
		return nil
	})
}

// TestReclaimScale: 10,000 distinct names locked and released on 3
// masters leave no lock key on any of them, and at most one fence key per
// slot (16384); holds whose owner died (never renewed nor released) and
// waiters that died leave nothing once their lease and waiter timeout are
// over.
func TestReclaimScale(t *testing.T) {
	g := testserver.RedisN(t, 3)
	c, err := dlock.New(open(t, g, "node_timeout=2s")) // a busy machine under -race
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dlocktest.Churn(t, ctx, c, "scale/", 10_000, true)
	// A fair waiter's entry on a master that did not grant it (it answered
	// late) stays until the waiter's deadline: at most the waiter timeout
	// (5s) and the queue's second of grace.
	locks, _ := lockKeysLeft(t, g)
	t.Logf("10,000 names locked and released: %d lock keys left at once", len(locks))
	waitLocks(t, g, 6*time.Second+10*time.Second)
	if _, fences := lockKeysLeft(t, g); fences > 16384 {
		t.Fatalf("%d fence keys on a master, want at most 16384", fences)
	} else {
		t.Logf("%d fence keys on the fullest master", fences)
	}

	// Dead holders and dead waiters, through a backend nobody renews.
	const ttl = 300 * time.Millisecond
	dead := open(t, g, "node_timeout=2s")
	for i := range 300 {
		name := fmt.Sprintf("dead/%d", i)
		if _, _, err := dead.Acquire(ctx, dlock.Request{Name: name, Owner: "dead", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			_, _, err := dead.Acquire(ctx, dlock.Request{Name: name, Owner: "waiter", TTL: ttl, Fair: i%20 == 0, Wait: true})
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("waiter on a held lock: %v", err)
			}
		}
	}
	// The bound: the lease, the waiter timeout (5s, a queue entry's
	// deadline) and the queues' second of grace, with slack.
	waitLocks(t, g, ttl+6*time.Second+10*time.Second)
	// The names' tokens still increase.
	l, err := c.Mutex("scale/1").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
}

// TestReclaimTokensAcrossDeletion: once a name's hash is gone from the
// masters, its next token is still above the last, even when the last
// was far ahead of the clocks (the fence key keeps it).
func TestReclaimTokensAcrossDeletion(t *testing.T) {
	g := testserver.RedisN(t, 3)
	c, err := dlock.New(open(t, g, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const ahead = uint64(1) << 52 // far beyond the clock in µs
	for _, n := range g.Nodes() {
		if _, err := n.Do(ctx, "HSET", "dlock:{n}", "f", strconv.FormatUint(ahead, 10)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if locks, _ := lockKeysLeft(t, g); len(locks) != 0 {
		t.Fatalf("keys left after the release: %v", locks)
	}
	l, err = c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if first <= ahead || l.Token() <= first {
		t.Fatalf("tokens %d then %d after a fence of %d", first, l.Token(), ahead)
	}
}

// checkScript records a grant on a Redis outside dlock's keys: it fails
// if the name is held by another checker or if the token is not above the
// name's last one.
var checkScript = goredis.NewScript(`
if redis.call('INCR', KEYS[1]) ~= 1 then return redis.error_reply('two holders at once') end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= last then return redis.error_reply('token ' .. ARGV[1] .. ' after ' .. last) end
redis.call('SET', KEYS[2], ARGV[1])
return 1
`)

// TestReclaimConcurrent: 3 backends, each on clients of its own (as 3
// processes would have), release and reclaim one shared name and 50
// shared names at once: no two hold a name at once, each name's tokens
// increase, and nothing is left but fence keys.
func TestReclaimConcurrent(t *testing.T) {
	g := testserver.RedisN(t, 3)
	check := goredis.NewClient(&goredis.Options{Addr: testserver.Redis(t).Addr()})
	defer check.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for p := range 3 {
		c, err := dlock.New(open(t, g, "node_timeout=2s"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for gr := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hold := func(name string, fair bool) error {
					var opts []dlock.Option
					if fair {
						opts = append(opts, dlock.Fair())
					}
					l, err := c.Mutex(name, opts...).Lock(ctx)
					if err != nil {
						return err
					}
					if err := checkScript.Run(ctx, check, []string{"busy:" + name, "tok:" + name}, l.Token()).Err(); err != nil {
						l.Unlock(ctx)
						return fmt.Errorf("%s: %w", name, err)
					}
					check.Decr(ctx, "busy:"+name)
					return l.Unlock(ctx)
				}
				for i := range 100 {
					if err := hold("one", (p+gr)%2 == 1); err != nil {
						errs <- err
						return
					}
					if err := hold(fmt.Sprintf("many/%d", (i*7+gr)%50), false); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitLocks(t, g, 6*time.Second+10*time.Second) // see TestReclaimScale
}
