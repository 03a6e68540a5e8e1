package redlock_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// slowReply is a go-redis hook that delays the first reply to an
// acquisition by owner, as a slow link back from the master would: the
// master has executed it, the client learns of it late.
type slowReply struct {
	owner string
	delay time.Duration
	done  atomic.Bool
}

func (h *slowReply) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *slowReply) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && slices.Contains(cmd.Args(), any(h.owner)) &&
			slices.Contains(cmd.Args(), any("f")) && h.done.CompareAndSwap(false, true) {
			time.Sleep(h.delay)
		}
		return err
	}
}

func (h *slowReply) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// hooked opens a backend on g whose client of master i has hook, with
// node timeout d.
func hooked(t *testing.T, g *testserver.RedisGroup, i int, hook goredis.Hook, d time.Duration) *redlock.Backend {
	t.Helper()
	var clients []*goredis.Client
	for j, a := range g.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		if j == i {
			c.AddHook(hook)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	b, err := redlock.New(clients, redlock.NodeTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestFairAttemptIDs: the late answer of a fair waiter's failed attempt
// is given back; that must not release what the waiter's next attempt got
// on the same master, or the waiter believes it holds a quorum that it no
// longer has and a second client gets the lock too.
func TestFairAttemptIDs(t *testing.T) {
	g := testserver.RedisN(t, 5)
	const w = "fair-waiter"
	hook := &slowReply{owner: w, delay: 500 * time.Millisecond}
	b := hooked(t, g, 2, hook, time.Second)
	ctx := context.Background()
	// Another owner holds every master but 2.
	for _, i := range []int{0, 1, 3, 4} {
		plantHold(t, g.Node(i), "fa", "other")
	}
	req := dlock.Request{Name: "fa", Owner: w, TTL: time.Minute, Fair: true, Wait: true}
	_, wt, err := b.Acquire(ctx, req)
	if !errors.Is(err, dlock.ErrNotAcquired) || wt == nil {
		t.Fatalf("first attempt: %v (waiter %v), want ErrNotAcquired and a waiter", err, wt)
	}
	// Master 2 granted the first attempt; its answer is on its way back.
	// The other owner's holds on masters 0 and 1 end.
	for _, i := range []int{0, 1} {
		if _, err := g.Node(i).Do(ctx, "DEL", "dlock:{fa}"); err != nil {
			t.Fatal(err)
		}
	}
	gr, err := wt.Acquire(ctx)
	granted := err == nil
	if !granted {
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("second attempt: %v", err)
		}
		// The waiter gives up and leaves the queue.
		if err := wt.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first attempt's late answer has come and been dealt with.
	time.Sleep(hook.delay + 300*time.Millisecond)
	if granted {
		// A granted lease must be held on a quorum: otherwise another
		// client can get one too.
		n := 0
		for _, m := range g.Nodes() {
			if holder(t, m, "fa") == w {
				n++
			}
		}
		if n < b.Quorum() {
			t.Fatalf("the waiter's second attempt was granted (token %d), but after the first attempt's late grant was given back only %d masters hold it", gr.Token, n)
		}
		return
	}
	// The other owner's holds end: the lock is free for a second client.
	for _, i := range []int{3, 4} {
		if _, err := g.Node(i).Do(ctx, "DEL", "dlock:{fa}"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err = b.Acquire(ctx, dlock.Request{Name: "fa", Owner: "second", TTL: time.Minute}); err != nil {
		t.Fatalf("the lock is stuck after the waiter's attempts failed: %v", err)
	}
}

// TestLostRenewalReleases: a renewal that a quorum of masters refuses
// (another owner holds the lock there) loses the lease, and what is left
// of the hold on the other masters is released at once rather than
// holding them until the TTL.
func TestLostRenewalReleases(t *testing.T) {
	g, l := heldOn5(t, "lost")
	for _, i := range []int{0, 1, 2} {
		plantHold(t, g.Node(i), "lost", "other")
	}
	if err := l.Extend(ctxT(t, 5*time.Second), time.Minute); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Extend with 3 of 5 masters held by another owner: %v, want ErrLeaseLost", err)
	}
	for _, i := range []int{3, 4} {
		freed(t, g.Node(i), "lost", 2*time.Second)
	}
	if err := l.Unlock(ctxT(t, 5*time.Second)); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the lost lease: %v, want ErrLeaseLost", err)
	}
}

// TestUnreachableRenewalKeeps: a renewal that misses a quorum only because
// masters did not answer (3 of 5 killed) does not end the lease: the
// masters that hold it keep it, the lease stays valid until its deadline
// (which does not move), and Extend reports that no quorum was reached.
func TestUnreachableRenewalKeeps(t *testing.T) {
	g, l := heldOn5(t, "cut")
	deadline := l.Deadline()
	kill(t, g, 0, 1, 2)
	err := l.Extend(ctxT(t, 5*time.Second), time.Minute)
	if !errors.Is(err, dlock.ErrNoQuorum) || errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Extend with 3 of 5 masters down: %v, want ErrNoQuorum and not ErrLeaseLost", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease after a renewal that reached no master of a quorum: %v, want it valid until its deadline", err)
	}
	if !l.Deadline().Equal(deadline) {
		t.Errorf("deadline moved from %v to %v by a renewal that reached no quorum", deadline, l.Deadline())
	}
	for _, i := range []int{3, 4} {
		if o := holder(t, g.Node(i), "cut"); o == "" {
			t.Errorf("master %d no longer holds the lease that is still valid", i)
		}
	}
}

// heldOn5 returns 5 masters and a lease of lock name on them, with a TTL
// of a minute, once every master has the grant.
func heldOn5(t *testing.T, name string) (*testserver.RedisGroup, *dlock.Lease) {
	t.Helper()
	g := testserver.RedisN(t, 5)
	c, err := dlock.New(open(t, g, "node_timeout=250ms"), dlock.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Mutex(name).Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // every master has the grant
	return g, l
}
