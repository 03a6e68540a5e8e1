package redlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
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
	b, err := redlock.OpenURL(context.Background(), masterURL(g, "node_timeout=250ms"))
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
