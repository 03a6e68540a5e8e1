package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// waitQueued waits until every master has n waiters in the queue key.
func waitQueued(t *testing.T, g *testserver.RedisGroup, key string, n int) {
	t.Helper()
	dlocktest.WaitFor(t, 30*time.Second, func() error {
		all := true
		var counts []int64
		for _, s := range g.Nodes() {
			v, err := s.Do(context.Background(), "ZCARD", key)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := v.(int64)
			counts = append(counts, c)
			if c != int64(n) {
				all = false
			}
		}
		if !all {
			return fmt.Errorf("%s: not %d waiters queued on every master: %v", key, n, counts)
		}
		return nil
	})
}

// waitHeldEverywhere waits until every master has a holder in the lock
// hash key.
func waitHeldEverywhere(t *testing.T, g *testserver.RedisGroup, key string) {
	t.Helper()
	dlocktest.WaitFor(t, 30*time.Second, func() error {
		for _, s := range g.Nodes() {
			v, err := s.Do(context.Background(), "HEXISTS", key, "o")
			if err != nil {
				t.Fatal(err)
			}
			if v != int64(1) {
				return fmt.Errorf("%s: not held on every master", key)
			}
		}
		return nil
	})
}

// TestOwnGiveBackDoesNotWake: a holder holds 4 of the 5 masters and the
// fifth is free. A waiter's attempt gets the free one and gives it back,
// and that give-back's notice must not wake the waiter (it frees nothing
// it did not count as free already): it waits for a release. Before, the
// notice counted on top of the free master and woke it every time, and
// it attempted about a thousand times a second.
func TestOwnGiveBackDoesNotWake(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	const name = "fourofive"
	key := "dlock:{" + name + "}"
	holder := open(t, g, "")
	if _, _, err := holder.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitHeldEverywhere(t, g, key)
	if _, err := g.Nodes()[4].Do(ctx, "HDEL", key, "o", "n", "g", "x"); err != nil {
		t.Fatal(err)
	}
	b := open(t, g, "")
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if _, err := c.Mutex(name).Lock(wctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock: %v, want ErrNotAcquired when ctx ends", err)
	}
	if n := redlock.Woken(b); n != 0 {
		t.Errorf("the waiter was woken %d times by notices; nobody released", n)
	}
}

// waitAcquire waits for w's notice and makes its next attempt, which must
// be granted.
func waitAcquire(t *testing.T, w dlock.Waiter) dlock.Grant {
	t.Helper()
	ctx := context.Background()
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := w.Acquire(ctx)
	if err != nil {
		t.Fatalf("the waiter's Acquire: %v", err)
	}
	return g
}

// TestReleaseWakesNamedWaiter: a release notice wakes only the waiter it
// names (the head of the fair queue, or of the wait queue of waiters that
// are not fair), not every waiter of the lock, and that waiter gets the
// lock by the notice. Each waiter is a process of its own (a Backend with
// its own connections); they queue in order, and the lock passes down the
// queue. The other processes receive no notice at all.
func TestReleaseWakesNamedWaiter(t *testing.T) {
	g := testserver.RedisN(t, 5)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			ctx := context.Background()
			name := fmt.Sprintf("wake-%v", fair)
			queue, queued := "dlock:{"+name+"}:wqueue", 0
			var opts []dlock.Option
			if fair {
				// The fair holder keeps its place at the head until it
				// releases.
				queue, queued = "dlock:{"+name+"}:queue", 1
				opts = append(opts, dlock.Fair())
			}
			// A long node timeout makes the promise of a released lock to
			// the named waiter outlast the waiters' timers on a slow
			// machine, so that only the order of the queue decides.
			newClient := func() (*redlock.Backend, *dlock.Client) {
				b := open(t, g, "node_timeout=3s")
				c, err := dlock.New(b, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return b, c
			}
			_, hc := newClient()
			held, err := hc.Mutex(name, dlock.TTL(time.Minute)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			const n = 3
			type result struct {
				i int
				l *dlock.Lease
				e error
			}
			got := make(chan result, n)
			backends := make([]*redlock.Backend, n)
			for i := range n {
				b, c := newClient()
				backends[i] = b
				go func() {
					l, err := c.Mutex(name, dlock.TTL(time.Minute)).Lock(ctx)
					got <- result{i, l, err}
				}()
				waitQueued(t, g, queue, queued+i+1)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			for want := range n {
				r := <-got
				if r.e != nil {
					t.Fatalf("waiter %d: %v", r.i, r.e)
				}
				if r.i != want {
					t.Fatalf("waiter %d got the lock before waiter %d, which the release named", r.i, want)
				}
				// (A release in the same process may instead send the
				// fair waiter's attempt along: see pass.go.)
				if w := redlock.Woken(backends[r.i]) + redlock.HandedWon(backends[r.i]); w == 0 {
					t.Errorf("waiter %d got the lock without a release notice waking it or an attempt sent along with the release", r.i)
				}
				for j := r.i + 1; j < n; j++ {
					if w := redlock.Woken(backends[j]); w != 0 {
						t.Errorf("waiter %d was woken %d times by releases that named waiter %d or before", j, w, r.i)
					}
					if m := redlock.Received(backends[j]); m != 0 {
						t.Errorf("waiter %d's process received %d notices of releases that named waiter %d or before", j, m, r.i)
					}
				}
				if err := r.l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPromiseToNamedWaiter: a release promises the lock to the waiter its
// notice names for the node timeout, so a newcomer that needs no notice
// does not take it first; a named waiter that does not try (here it never
// calls Wait, as a process that died) holds the lock up no longer than
// that, and one that withdraws passes the promise on at once.
func TestPromiseToNamedWaiter(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	b := open(t, g, "node_timeout=3s")
	for _, withdraw := range []bool{false, true} {
		t.Run(fmt.Sprintf("withdraw=%v", withdraw), func(t *testing.T) {
			name := fmt.Sprintf("promise-%v", withdraw)
			hold := func(owner string) dlock.Hold {
				gr, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: owner, TTL: time.Minute})
				if err != nil {
					t.Fatalf("Acquire by %s: %v", owner, err)
				}
				return dlock.Hold{Name: name, Owner: owner, Token: gr.Token, Handle: gr.Handle}
			}
			h := hold("holder")
			_, w, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "waiter", TTL: time.Minute, Wait: true})
			if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
				t.Fatalf("waiting Acquire = %v, %v; want ErrNotAcquired and a waiter", w, err)
			}
			if err := b.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
			if withdraw {
				if err := w.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				// Nobody is promised the lock any more.
				h := hold("newcomer")
				if err := b.Release(ctx, h); err != nil {
					t.Fatal(err)
				}
				return
			}
			defer w.Cancel(ctx)
			if _, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "newcomer", TTL: time.Minute}); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("a newcomer's Acquire while the lock is promised = %v, want ErrNotAcquired", err)
			}
			// The promise ends.
			deadline := time.Now().Add(time.Minute)
			for {
				gr, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "newcomer", TTL: time.Minute})
				if err == nil {
					if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "newcomer", Token: gr.Token, Handle: gr.Handle}); err != nil {
						t.Fatal(err)
					}
					return
				}
				if !errors.Is(err, dlock.ErrNotAcquired) || time.Now().After(deadline) {
					t.Fatalf("Acquire after the promise: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestSharedSubscription: the waiters of one Backend share one
// subscription per master to a lock's channel, instead of a connection
// each.
func TestSharedSubscription(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	b := open(t, g, "")
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const name = "shared"
	held, err := c.Mutex(name, dlock.TTL(time.Minute)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returns at a quorum; its late grants follow. A waiter whose
	// attempt overtook one of them would find that master free rather
	// than queue there.
	waitHeldEverywhere(t, g, "dlock:{"+name+"}")
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, err := c.Mutex(name, dlock.TTL(time.Minute)).Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs <- err
		}()
		waitQueued(t, g, "dlock:{"+name+"}:wqueue", i+1)
	}
	for i, s := range g.Nodes() {
		v, err := s.Do(ctx, "PUBSUB", "NUMSUB", "dlock:{"+name+"}:wake")
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := v.([]any); len(l) != 2 || l[1] != int64(1) {
			t.Errorf("master %d: PUBSUB NUMSUB = %v, want 1 subscriber for %d waiters", i, v, n)
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleaseHandsOnPromise: a waiter got the lock on a quorum while a
// master that it did not get (held there by another owner, whose hold
// there then expired) was promised to it; releasing its hold ends that
// promise there too, instead of keeping the master from every other
// waiter until the promise runs out.
func TestReleaseHandsOnPromise(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	b := open(t, g, "")
	const name = "handon"
	key := "dlock:{" + name + "}"
	gr, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "waiter", TTL: time.Minute, Wait: true})
	if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
		t.Fatalf("waiting Acquire = %v, %v; want ErrNotAcquired and a waiter", w, err)
	}
	if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "holder", Token: gr.Token, Handle: gr.Handle}); err != nil {
		t.Fatal(err)
	}
	// On the last master, another owner holds the lock for a moment, and
	// the lock is promised to the waiter for an hour.
	last := g.Node(4)
	id := redlock.WaiterID(w)
	if _, err := last.Do(ctx, "EVAL", `local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], 'o', 'other', 'n', 1, 'g', 'x', 'x', now + 300, 'p', ARGV[1], 'pt', now + 3600000)
return 1`, "1", key, id); err != nil {
		t.Fatal(err)
	}
	wg := waitAcquire(t, w)
	// Let the other owner's hold on the last master expire.
	for {
		v, err := last.Do(ctx, "EVAL", `local t = redis.call('TIME')
return tonumber(redis.call('HGET', KEYS[1], 'x')) <= t[1] * 1000 + math.floor(t[2] / 1000) and 1 or 0`, "1", key)
		if err != nil {
			t.Fatal(err)
		}
		if v == int64(1) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "waiter", Token: wg.Token, Handle: wg.Handle}); err != nil {
		t.Fatal(err)
	}
	// Release returns at a quorum; the last master may answer later.
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := last.Do(ctx, "HGET", key, "p")
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last master still promises the lock to %v after the waiter released its hold", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFirstWaitAfterSubscription: a waiter's first attempt fails before
// its subscriptions to the release notices exist, and its pub/sub
// connections take a while (here half a second per dial). Its first Wait
// returns only once the masters confirmed the subscriptions, so that its
// second attempt comes after them and the release that follows that
// attempt wakes it. Before, the first Wait returned at once, the second
// attempt came before the subscriptions, and the release went unheard:
// the waiter (and in a benchmark every contender that started at once)
// waited for maxWait.
func TestFirstWaitAfterSubscription(t *testing.T) {
	g := testserver.RedisN(t, 3)
	ctx := context.Background()
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			name := fmt.Sprintf("first-wait-%v", fair)
			hb := open(t, g, "node_timeout=3s")
			wb := open(t, g, "node_timeout=3s")
			var slow []*goredis.Client
			for _, addr := range g.Addrs() {
				c := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					select {
					case <-time.After(500 * time.Millisecond):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}})
				t.Cleanup(func() { c.Close() })
				slow = append(slow, c)
			}
			redlock.SetPubSubClients(wb, slow)

			gr, _, err := hb.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			h := dlock.Hold{Name: name, Owner: "holder", Token: gr.Token, Handle: gr.Handle}
			req := dlock.Request{Name: name, Owner: "waiter", TTL: time.Minute, Wait: true, Fair: fair}
			_, w, err := wb.Acquire(ctx, req)
			if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
				t.Fatalf("waiting Acquire = %v, %v; want ErrNotAcquired and a waiter", w, err)
			}
			defer w.Cancel(ctx)
			if err := w.Wait(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Acquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("second attempt while held = %v, want ErrNotAcquired", err)
			}
			if err := hb.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
			// maxWait (3 s and up to a quarter more) ends a Wait that
			// heard nothing; the notice must come well before.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := w.Wait(wctx); err != nil {
				t.Fatal(err)
			}
			if n := redlock.Woken(wb); n < 1 {
				t.Fatalf("the release after the waiter's second attempt woke it %d times; its Wait ended without a notice", n)
			}
			gr, err = w.Acquire(ctx)
			if err != nil {
				t.Fatalf("attempt after the release: %v", err)
			}
			if err := wb.Release(ctx, dlock.Hold{Name: name, Owner: "waiter", Token: gr.Token, Handle: gr.Handle}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNamedWithoutQuorum: the masters' wait queues disagree on their head
// (as while a crowd of waiters joins them, each master queueing them in
// the order their requests came), so that a release names waiter 0 on two
// masters, waiter 1 on two others and waiter 2 on the fifth, and promises
// the lock to each there. None of them hears a quorum of notices. Each
// tries again once those promises can have ended (a node timeout after
// the notice), instead of all of them waiting for maxWait (3 s) with the
// lock free, as before.
func TestNamedWithoutQuorum(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	const name = "named-without-quorum"
	hb := open(t, g, "")
	gr, _, err := hb.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := dlock.Hold{Name: name, Owner: "holder", Token: gr.Token, Handle: gr.Handle}
	type waiting struct {
		b *redlock.Backend
		w dlock.Waiter
	}
	ws := make([]waiting, 3)
	for i := range ws {
		b := open(t, g, "")
		_, w, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: fmt.Sprintf("waiter%d", i), TTL: time.Minute, Wait: true})
		if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
			t.Fatalf("waiter %d: Acquire = %v, %v; want ErrNotAcquired and a waiter", i, w, err)
		}
		defer w.Cancel(ctx)
		if err := w.Wait(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Acquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("waiter %d: attempt while held = %v, want ErrNotAcquired", i, err)
		}
		ws[i] = waiting{b, w}
	}
	// Master m keeps in its wait queue only the waiter it is to name.
	names := []int{0, 0, 1, 1, 2}
	for m, s := range g.Nodes() {
		for i, x := range ws {
			if i == names[m] {
				continue
			}
			for _, k := range []string{"wqueue", "wdeadlines"} {
				if _, err := s.Do(ctx, "ZREM", "dlock:{"+name+"}:"+k, redlock.WaiterID(x.w)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var woken []int64
	for _, x := range ws {
		woken = append(woken, redlock.Woken(x.b))
	}
	if err := hb.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	for i, x := range ws {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := x.w.Wait(wctx)
		cancel()
		if err != nil {
			t.Errorf("waiter %d, named by too few masters for a quorum: Wait = %v; want it to end well before maxWait", i, err)
		}
		if n := redlock.Woken(x.b) - woken[i]; n != 0 {
			t.Errorf("waiter %d was woken %d times by notices that make no quorum", i, n)
		}
	}
}
