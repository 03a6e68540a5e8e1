package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

// A backend holding many leases sets one recursive watch on its root, and
// a batch then renews every hold that the watch guards with one request for
// all of them: a hold granted after the watch was set is guarded from its
// grant, one granted before is read once (a request of its own). A node
// deleted behind the backend's back has its hold reported lost at once,
// and the next batch still needs one request.
func TestRenewBatchSendsOneRequest(t *testing.T) {
	srv := zkServer(t)
	b := connect(t, []string{srv.Addr()})
	ctx := ctxT(t, time.Minute)
	const ttl = 10 * time.Second
	n := 2*zookeeper.ArmHolds + 10
	var lost []dlock.Hold
	b.ReportLoss(func(h dlock.Hold, err error) {
		if !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("loss of %s reported as %v", h.Name, err)
		}
		lost = append(lost, h) // under the backend's lock
	})
	rs := make([]dlock.Renewal, n)
	for i := range rs {
		if i == zookeeper.ArmHolds {
			waitFor(t, "the recursive watch", func() bool { return zookeeper.WatchArmed(b) })
		}
		name, owner := fmt.Sprintf("batch/%d", i), fmt.Sprintf("owner-%d", i)
		g, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: owner, Token: g.Token, Handle: g.Handle}, TTL: ttl}
	}
	renew := func() ([]error, map[string]int64) {
		before := b.Stats()
		errs := b.RenewBatch(ctx, rs)
		return errs, diff(before, b.Stats())
	}
	noErrs := func(errs []error) {
		t.Helper()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("renewal %d: %v", i, err)
			}
		}
	}
	errs, sent := renew()
	noErrs(errs)
	// The holds granted before the watch was set, and the batch's own.
	if want := map[string]int64{"exists": int64(zookeeper.ArmHolds) + 1}; !sameCounts(sent, want) {
		t.Fatalf("first batch sent %v, want %v", sent, want)
	}
	for range 2 {
		errs, sent := renew()
		noErrs(errs)
		if want := map[string]int64{"exists": 1}; !sameCounts(sent, want) {
			t.Fatalf("later batch of %d sent %v, want %v", n, sent, want)
		}
	}

	for _, gone := range []int{7, zookeeper.ArmHolds + 7} {
		parent := zookeeper.LockPath(b, rs[gone].Hold.Name)
		kids, _, err := b.Conn().Children(parent)
		if err != nil || len(kids) != 1 {
			t.Fatalf("children of %s: %v, %v", parent, kids, err)
		}
		// On the backend's own connection, the deletion's notification
		// comes before the answer.
		if err := b.Conn().Delete(parent+"/"+kids[0], -1); err != nil {
			t.Fatal(err)
		}
		if len(lost) != 1 || lost[0].Name != rs[gone].Hold.Name {
			t.Fatalf("after deleting the node of %s, losses reported: %v", rs[gone].Hold.Name, lost)
		}
		lost = nil
		errs, sent = renew()
		for i, err := range errs {
			if isLost := errors.Is(err, dlock.ErrLeaseLost); isLost != (i == 7 || i == gone) {
				t.Errorf("renewal %d: %v", i, err)
			}
		}
		if want := map[string]int64{"exists": 1}; !sameCounts(sent, want) {
			t.Errorf("batch after a deletion sent %v, want %v", sent, want)
		}
	}
	for i, r := range rs {
		if i != 7 && i != zookeeper.ArmHolds+7 {
			if err := b.Release(ctx, r.Hold); err != nil {
				t.Error(err)
			}
		}
	}
}

// A backend holding few leases sets no recursive watch, which would bring
// it a notification for every change under the root: each renewal reads
// its node.
func TestFewHoldsSetNoWatch(t *testing.T) {
	srv := zkServer(t)
	b := connect(t, []string{srv.Addr()})
	ctx := ctxT(t, time.Minute)
	const n, ttl = 3, 10 * time.Second
	rs := make([]dlock.Renewal, n)
	for i := range rs {
		name := fmt.Sprintf("few/%d", i)
		g, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: "o", Token: g.Token, Handle: g.Handle}, TTL: ttl}
	}
	for range 2 {
		before := b.Stats()
		for i, err := range b.RenewBatch(ctx, rs) {
			if err != nil {
				t.Fatalf("renewal %d: %v", i, err)
			}
		}
		if sent, want := diff(before, b.Stats()), map[string]int64{"exists": n}; !sameCounts(sent, want) {
			t.Errorf("batch sent %v, want %v", sent, want)
		}
	}
	if zookeeper.WatchArmed(b) {
		t.Error("the recursive watch is set with a few holds")
	}
}

// A deletion while the connection is down brings no notification: after a
// reconnection no hold is guarded until its node is read again on the new
// connection, whose watch the backend sets again.
func TestRenewBatchAfterReconnect(t *testing.T) {
	srv := zkServer(t)
	px := newProxy(t, srv.Addr())
	b := connect(t, []string{px.Addr()})
	other := connect(t, []string{srv.Addr()})
	ctx := ctxT(t, time.Minute)
	const ttl = 10 * time.Second
	n := zookeeper.ArmHolds + 10
	rs := make([]dlock.Renewal, n)
	for i := range rs {
		name := fmt.Sprintf("reconnect/%d", i)
		g, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "o", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: "o", Token: g.Token, Handle: g.Handle}, TTL: ttl}
	}
	renew := func() ([]error, map[string]int64) {
		before := b.Stats()
		errs := b.RenewBatch(ctx, rs)
		return errs, diff(before, b.Stats())
	}
	for range 2 {
		for i, err := range b.RenewBatch(ctx, rs) {
			if err != nil {
				t.Fatalf("renewal %d: %v", i, err)
			}
		}
	}
	if errs, sent := renew(); errs[0] != nil || !sameCounts(sent, map[string]int64{"exists": 1}) {
		t.Fatalf("batch before the cut: sent %v, first error %v", sent, errs[0])
	}

	const gone = 3
	px.Block()
	waitFor(t, "the disconnection", func() bool { return b.Conn().State() != zk.StateHasSession })
	parent := zookeeper.LockPath(b, rs[gone].Hold.Name)
	kids, _, err := other.Conn().Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent, kids, err)
	}
	if err := other.Conn().Delete(parent+"/"+kids[0], -1); err != nil {
		t.Fatal(err)
	}
	px.Unblock()
	waitFor(t, "the reconnection", func() bool { return b.Conn().State() == zk.StateHasSession })

	errs, sent := renew()
	for i, err := range errs {
		if lost := errors.Is(err, dlock.ErrLeaseLost); lost != (i == gone) {
			t.Errorf("renewal %d after the reconnection: %v", i, err)
		}
	}
	// The watch again, the batch's read, and every node.
	if want := map[string]int64{"addWatch": 1, "exists": int64(n) + 1}; !sameCounts(sent, want) {
		t.Errorf("first batch after the reconnection sent %v, want %v", sent, want)
	}
	rs = append(rs[:gone], rs[gone+1:]...)
	errs, sent = renew()
	for i, err := range errs {
		if err != nil {
			t.Errorf("renewal %d: %v", i, err)
		}
	}
	if want := map[string]int64{"exists": 1}; !sameCounts(sent, want) {
		t.Errorf("second batch after the reconnection sent %v, want %v", sent, want)
	}
}

// A backend whose recursive watch is set still gets its one-shot watches:
// a waiter is granted at its predecessor's release with no request of its
// own, and a subscription sees a release.
func TestArmedBackendWaits(t *testing.T) {
	srv := zkServer(t)
	servers := []string{srv.Addr()}
	b, hb := connect(t, servers), connect(t, servers)
	ctx := ctxT(t, time.Minute)
	c := client(t, b)
	for i := range zookeeper.ArmHolds {
		if _, err := c.Mutex(fmt.Sprintf("armed/%d", i)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the recursive watch", func() bool { return zookeeper.WatchArmed(b) })
	holder, err := client(t, hb).Mutex("armed-wait").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res := lockWaiting(t, c, "armed-wait", ctx)
	before := b.Stats()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var r lockResult
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted 30s after the release")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := diff(before, b.Stats()); got["multi"]+got["getChildren2"]+got["exists"]+got["getData"] != 0 {
		t.Errorf("the waiter sent %v after the release, want no read", got)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates, err := c.Watch(wctx, "armed-wait")
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for seen := false; ; {
		select {
		case h := <-updates:
			switch {
			case len(h.Holders) == 1 && h.Holders[0].Token == r.l.Token() && !seen:
				seen = true
				if err := r.l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			case len(h.Holders) == 0 && seen:
				return
			}
		case <-timeout:
			t.Fatal("the subscription did not see the holder, then its release, within 30s")
		}
	}
}
