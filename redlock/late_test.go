package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// holder returns the owner of lock name on master n ("" when free).
func holder(t *testing.T, n *testserver.RedisServer, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := n.Do(ctx, "HGET", "dlock:{"+name+"}", "o")
	if err != nil {
		t.Fatalf("HGET on %s: %v", n.Addr(), err)
	}
	s, _ := v.(string)
	return s
}

// freed waits until master n no longer holds lock name, and fails the test
// if it still does after d (far less than the TTL of the hold).
func freed(t *testing.T, n *testserver.RedisServer, name string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		o := holder(t, n, name)
		if o == "" {
			return
		}
		if time.Now().After(end) {
			v, _ := n.Do(context.Background(), "HGETALL", "dlock:{"+name+"}")
			t.Fatalf("master %s still holds %q for %q %v after it resumed: a late grant nobody gives back (%v)", n.Addr(), name, o, d, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// plantHold makes owner hold name on master n for a minute, as another
// client's grant would.
func plantHold(t *testing.T, n *testserver.RedisServer, name, owner string) {
	t.Helper()
	ctx := context.Background()
	v, err := n.Do(ctx, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := strconv.ParseInt(v.([]any)[0].(string), 10, 64)
	x := strconv.FormatInt(secs*1000+60_000, 10)
	if _, err := n.Do(ctx, "HSET", "dlock:{"+name+"}", "o", owner, "n", "1", "g", "planted", "x", x, "f", "1"); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseBeforeLateGrant: a master paused (SIGSTOP) while an
// acquisition is sent to it executes the acquisition when it resumes, after
// the client returned at quorum and released (or, for a failed attempt,
// gave back what it got). That late grant must be given back: the master
// must not keep a hold nobody will release until its TTL.
func TestReleaseBeforeLateGrant(t *testing.T) {
	for _, tc := range []string{"released", "failed"} {
		t.Run(tc, func(t *testing.T) {
			g := testserver.RedisN(t, 5)
			b := open(t, g, "node_timeout=500ms")
			ctx := context.Background()
			name := "late-" + tc
			req := dlock.Request{Name: name, Owner: "o", TTL: time.Minute}
			// Every master gets an idle connection in the pool, over which
			// the acquisition reaches the paused master.
			for range 3 {
				gr, _, err := b.Acquire(ctx, req)
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "o", Token: gr.Token, Handle: gr.Handle}); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
			if tc == "failed" {
				// Another owner holds two masters: with master 2 paused,
				// only two can grant.
				plantHold(t, g.Node(0), name, "other")
				plantHold(t, g.Node(1), name, "other")
			}
			if err := g.Node(2).Pause(); err != nil {
				t.Fatal(err)
			}
			gr, _, err := b.Acquire(ctx, req)
			switch tc {
			case "released":
				if err != nil {
					t.Fatalf("Acquire with one master paused: %v", err)
				}
				if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "o", Token: gr.Token, Handle: gr.Handle}); err != nil {
					t.Fatalf("Release with one master paused: %v", err)
				}
			case "failed":
				if err == nil {
					t.Fatal("Acquire granted with two masters held by another and one paused")
				}
			}
			time.Sleep(600 * time.Millisecond) // past the node timeout
			if err := g.Node(2).Resume(); err != nil {
				t.Fatal(err)
			}
			freed(t, g.Node(2), name, 3*time.Second)
			for _, i := range []int{3, 4} {
				if o := holder(t, g.Node(i), name); o != "" {
					v, _ := g.Node(i).Do(context.Background(), "HGETALL", "dlock:{"+name+"}")
					t.Errorf("master %d holds %q for %q: %v", i, name, o, v)
				}
			}
		})
	}
}

// TestCloseWithRetriesPending: releases that could not reach a paused
// master are being retried when the backend is closed; Close stops the
// retries and returns within about a node timeout, leaving no goroutine
// behind (TestMain checks with goleak).
func TestCloseWithRetriesPending(t *testing.T) {
	g := testserver.RedisN(t, 5)
	b, err := redlock.Open(context.Background(), strings.Join(g.Addrs(), ","), redlock.NodeTimeout(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := dlock.Request{Name: "close", Owner: "o", TTL: time.Minute}
	if err := g.Node(4).Pause(); err != nil {
		t.Fatal(err)
	}
	defer g.Node(4).Resume()
	for range 3 {
		gr, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("Acquire with one master paused: %v", err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: "close", Owner: "o", Token: gr.Token, Handle: gr.Handle}); err != nil {
			t.Fatalf("Release with one master paused: %v", err)
		}
	}
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Close took %v with give-backs pending on a paused master", el)
	}
}

// slowSend is a go-redis hook that, once armed, holds back the next
// acquisition by owner in mode (the acquire script's mode argument) for
// delay before sending it, as a master's queue of calls would; sent is
// closed when that call has its answer.
type slowSend struct {
	owner, mode string
	delay       time.Duration
	armed       atomic.Bool
	sent        chan struct{}
}

func (h *slowSend) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *slowSend) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && slices.Contains(cmd.Args(), any(h.owner)) &&
			slices.Contains(cmd.Args(), any(h.mode)) && h.armed.CompareAndSwap(true, false) {
			time.Sleep(h.delay)
			defer close(h.sent)
		}
		return next(ctx, cmd)
	}
}

func (h *slowSend) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestLateAnswerLeavesQueue: a waiter's attempt is granted by a quorum
// while its request to the last master is still on its way; the waiter
// releases, and only then does the request reach the last master, where
// another owner holds the lock by now: the request queues the waiter
// there again. The waiter is gone, so it must not stay in that master's
// queue (until its deadline, 5s), where it would be the head that every
// release promises the lock to (or, fair, the only one it may go to), so
// that the next waiters could get only four masters and split them.
func TestLateAnswerLeavesQueue(t *testing.T) {
	for _, tc := range []struct {
		name, mode, queue string
		fair              bool
	}{{"wait", "w", ":wqueue", false}, {"fair", "f", ":queue", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := testserver.RedisN(t, 5)
			name := "lq-" + tc.name
			key := "dlock:{" + name + "}"
			hook := &slowSend{owner: "waiter", mode: tc.mode, delay: 500 * time.Millisecond, sent: make(chan struct{})}
			b := hooked(t, g, 4, hook, 2*time.Second)
			ctx := context.Background()
			start := time.Now()
			hg, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// Acquire returns at a quorum; the waiter must find the
			// lock held on every master, and queue there.
			for i, m := range g.Nodes() {
				for holder(t, m, name) != "holder" {
					if time.Since(start) > 10*time.Second {
						t.Fatalf("master %d does not hold the lock for the holder", i)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			_, w, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "waiter", TTL: time.Minute, Wait: true, Fair: tc.fair})
			if !errors.Is(err, dlock.ErrNotAcquired) || w == nil {
				t.Fatalf("waiting Acquire = %v, %v; want ErrNotAcquired and a waiter", w, err)
			}
			id := redlock.WaiterID(w)
			waitQueued(t, g, key+tc.queue, 1)
			hook.armed.Store(true)
			if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "holder", Token: hg.Token, Handle: hg.Handle}); err != nil {
				t.Fatal(err)
			}
			wg := waitAcquire(t, w)
			// Another owner takes the last master while the waiter's
			// request to it is held back.
			plantHold(t, g.Node(4), name, "other")
			if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "waiter", Token: wg.Token, Handle: wg.Handle}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hook.sent:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter's request to the last master was never sent")
			}
			// The request queued the waiter on the last master; its late
			// answer must take it out again, well before its deadline.
			deadline := time.Now().Add(2 * time.Second)
			for {
				v, err := g.Node(4).Do(ctx, "ZSCORE", key+tc.queue, id)
				if err != nil && !errors.Is(err, goredis.Nil) {
					t.Fatal(err)
				}
				if v == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the last master still queues the waiter %s in %s after its late answer (the waiter released its hold)", id, key+tc.queue)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestReentryOfTheQuorumHold: the owner holds the lock on 3 masters by
// one grant (token A) and on the other 2 by a later one (token B, a hold
// of the same owner that never reached a quorum). A reentrant acquisition
// re-enters the quorum's hold and returns its token A, not the highest
// token seen, and the increments on the other hold's masters are undone.
// (Seen under load as TestConformance/ReentrantOwner: "second reentrant
// lease: token B holds 3, want token A holds 3".)
func TestReentryOfTheQuorumHold(t *testing.T) {
	g := testserver.RedisN(t, 5)
	ctx := context.Background()
	b := open(t, g, "")
	const name, owner = "quorumhold", "o"
	key := "dlock:{" + name + "}"
	until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	const tokA, tokB = "1000", "2000"
	for i, s := range g.Nodes() {
		tok, gid := tokA, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		if i >= 3 {
			tok, gid = tokB, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		}
		if _, err := s.Do(ctx, "HSET", key, "o", owner, "n", "1", "g", gid, "x", until, "f", tok); err != nil {
			t.Fatal(err)
		}
	}
	gr, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: owner, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if gr.Token != 1000 || gr.Count != 2 {
		t.Fatalf("reentry: token %d count %d, want 1000 and 2", gr.Token, gr.Count)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, s := range g.Nodes() {
		want := "2"
		if i >= 3 {
			want = "1" // the other hold's count, its increment undone
		}
		for {
			v, err := s.Do(ctx, "HGET", key, "n")
			if err != nil {
				t.Fatal(err)
			}
			if v == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("master %d: count %v, want %s", i, v, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
