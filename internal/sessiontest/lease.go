package sessiontest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// LeaseEnv is one database server under test, with backends in
// lease-table mode.
type LeaseEnv struct {
	// Backend returns a new lease-mode Backend on the server's test
	// database; the caller closes it.
	Backend func(t *testing.T) dlock.Backend
	// TerminateAll ends, from the server, every client connection but
	// its own (pg_terminate_backend, KILL) and returns how many.
	TerminateAll func(t *testing.T) int
	// Server is the server's process, killed and restarted on the same
	// data by ServerRestart.
	Server Server
}

// RunLease runs every lease-mode scenario as a subtest, each on a server
// of its own from newEnv.
func RunLease(t *testing.T, newEnv func(t *testing.T) LeaseEnv) {
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, LeaseEnv)
	}{{"ConnectionsTerminated", ConnectionsTerminated}, {"ServerRestart", ServerRestart}} {
		t.Run(sc.name, func(t *testing.T) { sc.fn(t, newEnv(t)) })
	}
}

// client returns a Client on a new Backend, closed at clean-up.
func (env LeaseEnv) client(t *testing.T) *dlock.Client {
	t.Helper()
	c, err := dlock.New(env.Backend(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ConnectionsTerminated: the server ends the connections of a live
// holder (pg_terminate_backend, KILL) again and again: in lease mode that loses
// nothing — renewals and the release go through new connections — and a
// waiter gets the lock only after the release, with a higher token. A
// holder that stops renewing (a crashed process) loses the lock at the
// end of its TTL, by the database's clock, to a waiter with a higher
// token.
func ConnectionsTerminated(t *testing.T, env LeaseEnv) {
	ctx := context.Background()
	holder, waiter := env.client(t), env.client(t)
	l, err := holder.Mutex("term", dlock.TTL(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex("term", dlock.TTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for range 6 {
		time.Sleep(400 * time.Millisecond)
		t.Logf("terminated %d connections", env.TerminateAll(t))
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the live holder lost its lease to terminated connections: %v", err)
	}
	select {
	case <-got:
		t.Fatal("the waiter got the lock while the holder held it")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after terminated connections: %v", err)
	}
	var l2 *dlock.Lease
	select {
	case l2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}

	// A holder that dies with its connections: the lock expires.
	b := env.Backend(t)
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "term2", Owner: "dead", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Close() // never renewed, never released
	go func() {
		l, err := waiter.Mutex("term2", dlock.TTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	start := time.Now()
	time.Sleep(200 * time.Millisecond) // the waiter's first attempt (which would report an outage at once) is over
	env.TerminateAll(t)
	l3 := <-got
	if l3 == nil {
		t.FailNow()
	}
	t.Logf("the dead holder's lock (token %d) went to the waiter (token %d) after %v", g.Token, l3.Token(), time.Since(start))
	if l3.Token() <= g.Token {
		t.Errorf("token %d after %d", l3.Token(), g.Token)
	}
	l2.Unlock(ctx)
	l3.Unlock(ctx)
}

// ServerRestart: the server is killed and restarted while locks are
// held. Afterwards every lock is either still held by its live holder or
// free (no stuck locks), and new grants have higher tokens than before.
func ServerRestart(t *testing.T, env LeaseEnv) {
	ctx := context.Background()
	a, b := env.client(t), env.client(t)
	leases := lockAndRestart(t, a, env.Server, "restart", 5)
	// The holder may or may not have kept its leases through the outage
	// (2s TTL); either way it releases what it holds, and each lock is
	// then free for b, with a higher token.
	for i, l := range leases {
		held := l.Err() == nil
		err := l.Unlock(ctx)
		t.Logf("lock %d: held through the restart: %v; unlock: %v", i, held, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l2, err := b.Mutex(fmt.Sprint("restart", i), dlock.TTL(2*time.Second)).Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("lock %d after the restart: %v", i, err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("lock %d: token %d after %d", i, l2.Token(), l.Token())
		}
		l2.Unlock(ctx)
	}
}
