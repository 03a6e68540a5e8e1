package zookeeper_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
)

// A batch renews the holds whose watches are quiet with one request for
// all of them; a hold's first renewal reads its node (and leaves the
// watch), and a node deleted behind the backend's back fires its watch, so
// the next batch reads that node again and finds the hold lost.
func TestRenewBatchSendsOneRequest(t *testing.T) {
	srv := zkServer(t)
	b := connect(t, []string{srv.Addr()})
	ctx := ctxT(t, time.Minute)
	const n, ttl = 50, 10 * time.Second
	rs := make([]dlock.Renewal, n)
	for i := range rs {
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
	if want := map[string]int64{"exists": n}; !sameCounts(sent, want) {
		t.Fatalf("first batch sent %v, want %v", sent, want)
	}
	for range 2 {
		errs, sent := renew()
		noErrs(errs)
		if want := map[string]int64{"exists": 1}; !sameCounts(sent, want) {
			t.Fatalf("later batch of %d sent %v, want %v", n, sent, want)
		}
	}

	const gone = 7
	parent := zookeeper.LockPath(b, rs[gone].Hold.Name)
	kids, _, err := b.Conn().Children(parent)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent, kids, err)
	}
	if err := b.Conn().Delete(parent+"/"+kids[0], -1); err != nil {
		t.Fatal(err)
	}
	errs, sent = renew()
	for i, err := range errs {
		if lost := errors.Is(err, dlock.ErrLeaseLost); lost != (i == gone) {
			t.Errorf("renewal %d: %v", i, err)
		}
	}
	if want := map[string]int64{"exists": 2}; !sameCounts(sent, want) {
		t.Errorf("batch after a deletion sent %v, want %v", sent, want)
	}
	for i, r := range rs {
		if i != gone {
			if err := b.Release(ctx, r.Hold); err != nil {
				t.Error(err)
			}
		}
	}
}
