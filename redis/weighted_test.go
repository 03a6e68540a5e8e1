package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// attempts is a Redis backend that counts the attempts of its acquisitions
// (first attempts and the Waiter's); the embedded Backend gives the rest,
// CanGrant included.
type attempts struct {
	*dredis.Backend
	n atomic.Int64
}

func (a *attempts) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	a.n.Add(1)
	g, w, err := a.Backend.Acquire(ctx, req)
	if w != nil {
		w = countedWaiter{w, &a.n}
	}
	return g, w, err
}

type countedWaiter struct {
	dlock.Waiter
	n *atomic.Int64
}

func (w countedWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.n.Add(1)
	return w.Waiter.Acquire(ctx)
}

// queueLen returns the length of name's queue.
func queueLen(t testing.TB, admin *goredis.Client, name string) int64 {
	t.Helper()
	n, err := admin.LLen(context.Background(), dredis.LockKey("dlock", name)+":queue").Result()
	if err != nil {
		t.Fatalf("LLEN: %v", err)
	}
	return n
}

// TestWeightedWokenByPush: the waiters of a semaphore are woken by the
// release notice, in order, each only when it fits: a release of weight 2
// wakes the head, whose grant wakes the next; the third, which does not
// fit, is not woken until a permit is released. Nothing polls: the waiter
// timeout and the holder's TTL are far longer than the test's deadline,
// and each waiter makes at most three attempts (the first, one when its
// subscription is confirmed, one when woken).
func TestWeightedWokenByPush(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	const name = "push"
	holder := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(time.Minute))
	big, err := holder.Semaphore(name, 2, dlock.Weight(2)).Acquire(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	var bs [3]*attempts
	var res [3]chan result
	ctx := ctxFor(t, 10*time.Second) // well below a third of the waiter timeout
	for i := range bs {
		bs[i] = &attempts{Backend: newBackend(t, srv.Addr(), dredis.WaiterTimeout(time.Minute))}
		c := newDlock(t, bs[i], dlock.TTL(time.Minute))
		res[i] = make(chan result, 1)
		go func() {
			l, err := c.Semaphore(name, 2).Acquire(ctx)
			res[i] <- result{l, err}
		}()
		dlocktest.WaitFor(t, 10*time.Second, func() error {
			if n := queueLen(t, admin, name); n != int64(i+1) {
				return fmt.Errorf("%d waiters queued, want %d", n, i+1)
			}
			return nil
		})
	}
	// Each waiter has confirmed its subscription: a second attempt.
	dlocktest.WaitFor(t, 10*time.Second, func() error {
		for i, b := range bs {
			if n := b.n.Load(); n < 2 {
				return fmt.Errorf("waiter %d made %d attempts", i, n)
			}
		}
		return nil
	})
	if err := big.Unlock(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	var got [2]*dlock.Lease
	for i := range got {
		r := <-res[i]
		if r.err != nil {
			t.Fatalf("waiter %d after the release: %v", i, r.err)
		}
		got[i] = r.l
	}
	if got[1].Token() <= got[0].Token() {
		t.Errorf("tokens %d then %d: not in queue order", got[0].Token(), got[1].Token())
	}
	select {
	case r := <-res[2]:
		t.Fatalf("a third permit of a semaphore of 2 was granted: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := bs[2].n.Load(); n != 2 {
		t.Errorf("the waiter that does not fit made %d attempts, want 2 (it was woken for nothing)", n)
	}
	if err := got[0].Unlock(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	r := <-res[2]
	if r.err != nil {
		t.Fatalf("the third waiter after a permit was released: %v", r.err)
	}
	for i, b := range bs {
		if n := b.n.Load(); n > 3 {
			t.Errorf("waiter %d made %d attempts, want at most 3", i, n)
		}
	}
	for _, l := range []*dlock.Lease{got[1], r.l} {
		if err := l.Unlock(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWeightedStateBounded: a weighted name keeps keys only while it has
// holders or waiters. Released permits and a waiter that gave up leave
// none (the fence key aside); so does a holder that vanished, once its
// lease has ended, by the keys' own expiry.
func TestWeightedStateBounded(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	b := newBackend(t, srv.Addr(), dredis.KeyPrefix("wsb"))
	c := newDlock(t, b, dlock.TTL(time.Minute))
	ctx := ctxFor(t, time.Minute)
	sem := c.Semaphore("s", 2)
	p1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := sem.Acquire(wctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a third permit: %v, want ErrNotAcquired", err)
	}
	if locks, _ := dlockKeys(t, admin, "wsb"); len(locks) == 0 {
		t.Fatal("no keys while permits are held")
	}
	for _, l := range []*dlock.Lease{p1, p2} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if locks, _ := dlockKeys(t, admin, "wsb"); len(locks) > 0 {
		t.Fatalf("keys left after every permit was released and the waiter left: %v", locks)
	}

	// A holder that vanished: a grant with no Client to renew or release it.
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "s", Owner: "gone", TTL: 300 * time.Millisecond,
		Kind: dlock.KindRWMutex, Limit: dlock.RWLimit, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token == 0 {
		t.Fatal("no token")
	}
	waitKeys(t, admin, "wsb", 10*time.Second)
}

// TestWeightedForeign: a weighted state edited by hand into what dlock
// never writes is refused with ErrForeignData and left as it is; Inspect
// lists it with Bad.
func TestWeightedForeign(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	b := newBackend(t, srv.Addr())
	c := newDlock(t, b)
	ctx := ctxFor(t, time.Minute)
	key := dredis.LockKey("dlock", "f")
	live := time.Now().Add(time.Hour).UnixMilli()
	dump := func() string {
		var s []string
		for _, k := range []string{key, key + ":holders"} {
			m, _ := admin.HGetAll(ctx, k).Result()
			s = append(s, fmt.Sprint(m))
		}
		z, _ := admin.ZRangeWithScores(ctx, key+":expiry", 0, -1).Result()
		return strings.Join(s, " ") + fmt.Sprint(z)
	}
	for _, tc := range []struct {
		what  string
		state []any
		hold  string // a holder record of owner "x"
		want  string
	}{
		{"more weight held than the limit", []any{"o", "", "x", live, "k", 1, "l", 2, "u", 5}, "", "above the limit"},
		{"a negative count", []any{"o", "", "x", live, "k", 1, "l", 2, "u", 1}, "1 -1 5 ab", "holder record"},
		{"a weight above the limit", []any{"o", "", "x", live, "k", 1, "l", 2, "u", 2}, "3 1 5 ab", "holder record"},
		{"an unknown kind", []any{"o", "", "x", live, "k", 9, "l", 2, "u", 0}, "", "kind k"},
		{"a negative weight held", []any{"o", "", "x", live, "k", 1, "l", 2, "u", -1}, "", "weight held u"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			admin.Del(ctx, key, key+":holders", key+":expiry")
			admin.HSet(ctx, key, tc.state...)
			if tc.hold != "" {
				admin.HSet(ctx, key+":holders", "x", tc.hold)
				admin.ZAdd(ctx, key+":expiry", goredis.Z{Score: float64(live), Member: "x"})
			}
			before := dump()
			l, err := c.Semaphore("f", 2, dlock.Owner("x")).TryAcquire(ctx)
			if err == nil {
				l.Unlock(ctx)
				t.Fatal("granted")
			}
			if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TryAcquire: %v, want ErrForeignData saying %q", err, tc.want)
			}
			if after := dump(); after != before {
				t.Errorf("the state changed:\nbefore %s\nafter  %s", before, after)
			}
			infos, err := b.Inspect(ctx, "f")
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) == 0 || infos[0].Bad == "" {
				t.Errorf("Inspect: %+v, want a row with Bad", infos)
			}
		})
	}
	t.Run("another type", func(t *testing.T) {
		admin.Del(ctx, key, key+":holders", key+":expiry")
		admin.HSet(ctx, key, "o", "", "x", live, "k", 1, "l", 2, "u", 0)
		admin.Set(ctx, key+":holders", "x", 0)
		_, err := c.Semaphore("f", 2).TryAcquire(ctx)
		if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), key+":holders") {
			t.Errorf("TryAcquire: %v, want ErrForeignData naming %s", err, key+":holders")
		}
		if v, _ := admin.Get(ctx, key+":holders").Result(); v != "x" {
			t.Errorf("the foreign key holds %q", v)
		}
	})
	admin.Del(ctx, key, key+":holders", key+":expiry")
}

// TestWeightedKinds: a name held as a semaphore refuses a mutex (through
// the mutex's own path) and the other way round, with a *ConflictError,
// and Inspect lists one row per holder with its weight.
func TestWeightedKinds(t *testing.T) {
	srv := testserver.Redis(t)
	b := newBackend(t, srv.Addr())
	c := newDlock(t, b)
	ctx := ctxFor(t, time.Minute)
	p, err := c.Semaphore("k", 3, dlock.Weight(2)).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Semaphore("k", 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var conflict *dlock.ConflictError
	for _, wait := range []bool{false, true} {
		m := c.Mutex("k", dlock.Fair())
		var err error
		if wait {
			_, err = m.Lock(ctx)
		} else {
			_, err = m.TryLock(ctx)
		}
		if !errors.As(err, &conflict) || conflict.Kind != dlock.KindSemaphore || conflict.Limit != 3 || !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("a mutex over a semaphore of 3 (wait %v): %v, want a ConflictError", wait, err)
		}
	}
	infos, err := b.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("Inspect: %+v, want two holders", infos)
	}
	weights := map[uint64]int{}
	for _, in := range infos {
		if in.Kind != dlock.KindSemaphore || in.Limit != 3 || in.Count != 1 || in.TTL <= 0 || in.Bad != "" {
			t.Errorf("Inspect row %+v", in)
		}
		weights[in.Token] = in.Weight
	}
	if weights[p.Token()] != 2 || weights[q.Token()] != 1 {
		t.Errorf("Inspect weights by token %v, want %d:2 and %d:1", weights, p.Token(), q.Token())
	}
	p.Unlock(ctx)
	q.Unlock(ctx)

	m, err := c.Mutex("k").Lock(ctx)
	if err != nil {
		t.Fatalf("a mutex after the semaphore's last permit: %v", err)
	}
	_, err = c.Semaphore("k", 3).TryAcquire(ctx)
	if !errors.As(err, &conflict) || conflict.Kind != dlock.KindMutex || conflict.AskedLimit != 3 {
		t.Errorf("a semaphore over a mutex: %v, want a ConflictError", err)
	}
	s, err := c.Semaphore("k", 3).Acquire(ctxFor(t, 100*time.Millisecond))
	if !errors.As(err, &conflict) {
		t.Errorf("a waiting semaphore over a mutex: %v, %v, want a ConflictError", s, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Semaphore("k", 3).Acquire(ctx); err != nil || l.Token() <= m.Token() {
		t.Errorf("a semaphore after the mutex: %v, token %v after %d", err, l, m.Token())
	} else {
		l.Unlock(ctx)
	}
}

// TestWeightedRenewal: the Client's renewal loop keeps mutex and weighted
// leases of one backend alive together over several TTLs (RenewBatch
// sends each kind to its own script).
func TestWeightedRenewal(t *testing.T) {
	srv := testserver.Redis(t)
	c := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(300*time.Millisecond))
	ctx := ctxFor(t, time.Minute)
	var ls []*dlock.Lease
	for _, f := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex("rm").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.Semaphore("rs", 2).Acquire(ctx) },
		func() (*dlock.Lease, error) { return c.Semaphore("rs", 2).Acquire(ctx) },
		func() (*dlock.Lease, error) { return c.RWMutex("rw").RLock(ctx) },
	} {
		l, err := f()
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	time.Sleep(1200 * time.Millisecond) // four TTLs
	for _, l := range ls {
		if err := l.Err(); err != nil {
			t.Errorf("%s after four TTLs: %v", l.Name(), err)
		}
	}
	if _, err := c.Semaphore("rs", 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a third permit beside two renewed ones: %v", err)
	}
	for _, l := range ls {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}
