package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// newBackend makes a backend on clients of its own to the masters addrs, in
// that order.
func newBackend(t *testing.T, addrs []string) *redlock.Backend {
	t.Helper()
	var cs []*goredis.Client
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	b, err := redlock.New(cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// lockAsync starts c.Mutex(name).Lock and returns where its lease comes.
func lockAsync(t *testing.T, c *dlock.Client, name string) <-chan *dlock.Lease {
	ch := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctxT(t, time.Minute))
		if err != nil {
			t.Error(err)
		}
		ch <- l
	}()
	return ch
}

func lease(t *testing.T, ch <-chan *dlock.Lease, within time.Duration) *dlock.Lease {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.FailNow()
		}
		return l
	case <-time.After(within):
		t.Fatalf("no lease within %v", within)
	}
	return nil
}

// TestReleasePassesToParkedWaiter: a release of a fair lock sends the
// attempt of a fair waiter of the same process (another Backend on the
// same masters) along with it, and that attempt gets the waiter the lock,
// with a higher token. A fair waiter of another process (here a Backend
// that lists the masters in another order, so that it does not share the
// parked waiters) that came first keeps its place: the attempt sent along
// is refused, and the other waiter gets the lock first.
func TestReleasePassesToParkedWaiter(t *testing.T) {
	g := testserver.RedisN(t, 3)
	addrs := g.Addrs()
	hb, wb := newBackend(t, addrs), newBackend(t, addrs)
	ob := newBackend(t, slices.Concat(addrs[1:], addrs[:1])) // "another process"
	holder, waiter, other := fairClient(t, hb), fairClient(t, wb), fairClient(t, ob)
	const name = "pass"

	l, err := holder.Mutex(name).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, waiter, name)
	silenttest.PollUntil(t, 10*time.Second, "the waiter parked", func() bool { return redlock.Parked(hb, name) == 1 })
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	wl := lease(t, got, 10*time.Second)
	if n := redlock.Passed(hb); n != 1 {
		t.Errorf("%d releases sent a waiter's attempt along, want 1", n)
	}
	if n := redlock.HandedWon(wb); n != 1 {
		t.Errorf("%d attempts sent along got the lock, want 1", n)
	}
	if wl.Token() <= l.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", wl.Token(), l.Token())
	}

	// The other process's waiter queues first, then this process's. (The
	// fair holder keeps its place at the head of the queue until it
	// releases: the other waiter is the second.)
	gotOther := lockAsync(t, other, name)
	silenttest.PollUntil(t, 10*time.Second, "the other waiter queued on every master", func() bool {
		for _, s := range g.Nodes() {
			if n, _ := s.Do(context.Background(), "ZCARD", redlock.LockKey(wb, name)+":queue"); n != int64(2) {
				return false
			}
		}
		return true
	})
	got = lockAsync(t, holder, name)
	silenttest.PollUntil(t, 10*time.Second, "the second waiter parked", func() bool { return redlock.Parked(wb, name) == 1 })
	if err := wl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ol := lease(t, gotOther, 10*time.Second)
	if n := redlock.HandedWon(hb); n != 0 {
		t.Errorf("the attempt sent along got the lock ahead of a waiter that came first")
	}
	select {
	case l := <-got:
		t.Fatalf("this process's waiter got the lock (token %d) while the other holds it (token %d)", l.Token(), ol.Token())
	case <-time.After(200 * time.Millisecond):
	}
	if err := ol.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	hl := lease(t, got, 10*time.Second)
	if hl.Token() <= ol.Token() || ol.Token() <= wl.Token() {
		t.Errorf("tokens %d, %d, %d do not increase", wl.Token(), ol.Token(), hl.Token())
	}
	hl.Unlock(context.Background())
}

func fairClient(t *testing.T, b *redlock.Backend) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b, dlock.Fair())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
