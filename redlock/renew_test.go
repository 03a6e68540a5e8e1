package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
)

// scriptCalls returns the script calls (EVALSHA and EVAL) master s ran
// since its statistics were last reset.
func scriptCalls(t *testing.T, s *testserver.RedisServer) int64 {
	t.Helper()
	v, err := s.Do(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if ok && (name == "cmdstat_evalsha" || name == "cmdstat_eval") {
			calls, _, _ := strings.Cut(rest, ",")
			c, _ := strconv.ParseInt(calls, 10, 64)
			n += c
		}
	}
	return n
}

// TestBatchRenewal: a Client holding many leases renews them with one
// script call per master per renewal pass, not one per lease, and keeps
// them all.
func TestBatchRenewal(t *testing.T) {
	g := testserver.RedisN(t, 3)
	const ttl, leases = 900 * time.Millisecond, 100
	c, err := dlock.New(open(t, g, ""), dlock.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, time.Minute)
	held := make([]*dlock.Lease, leases)
	for i := range held {
		if held[i], err = c.Mutex("batch/" + strconv.Itoa(i)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range g.Nodes() {
		if _, err := s.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * ttl) // at least 6 renewal passes (every TTL/3)
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d of %d lost while held: %v", i, leases, err)
		}
	}
	for i, s := range g.Nodes() {
		// Each lease was renewed at least twice: one call per lease
		// would be at least 2*leases calls.
		if n := scriptCalls(t, s); n == 0 || n >= leases {
			t.Errorf("master %d ran %d script calls while %d leases were held for %v (TTL %v), want a few per renewal pass", i, n, leases, 3*ttl, ttl)
		}
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestBatchRenewalForeign: in one batch, a hold whose key holds foreign
// data on one master of three is still renewed by the other two, one with
// foreign data on two masters is lost (and says which key), and the other
// holds of the batch are renewed.
func TestBatchRenewalForeign(t *testing.T) {
	g := testserver.RedisN(t, 3)
	b := open(t, g, "")
	ctx := ctxT(t, time.Minute)
	var rs []dlock.Renewal
	for _, name := range []string{"ok", "one", "two"} {
		gr, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "o-" + name, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, dlock.Renewal{Hold: dlock.Hold{Name: name, Owner: "o-" + name, Token: gr.Token, Handle: gr.Handle}, TTL: time.Minute})
	}
	plant := func(node int, name string) {
		t.Helper()
		key := redlock.LockKey(b, name)
		if _, err := g.Node(node).Do(ctx, "DEL", key); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Node(node).Do(ctx, "SET", key, "not a lock"); err != nil {
			t.Fatal(err)
		}
	}
	plant(0, "one")
	plant(0, "two")
	plant(1, "two")
	errs := b.RenewBatch(ctx, rs)
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("RenewBatch: %v for the clean hold and %v for the hold with one foreign key, want nil", errs[0], errs[1])
	}
	if !errors.Is(errs[2], dlock.ErrLeaseLost) || !strings.Contains(errs[2].Error(), redlock.LockKey(b, "two")) {
		t.Errorf("RenewBatch of the hold with foreign data on 2 of 3 masters: %v, want ErrLeaseLost naming its key", errs[2])
	}
	for i := range 3 {
		if v, err := g.Node(i).Do(ctx, "GET", redlock.LockKey(b, "two")); i < 2 && (err != nil || v != "not a lock") {
			t.Errorf("master %d: the foreign key is now %v (%v), want it untouched", i, v, err)
		}
	}
}
