// Package silenttest holds the scenarios of a link that goes silent: the
// requests of a backend reach its server but the replies never come back
// (testserver.Proxy swallows them). Each backend's tests run them against
// a real server of its own through an [Env]. Lock, Unlock and Extend must
// return by their context plus dlock.CancelGrace, and afterwards nothing
// the silent client did may hold the lock beyond its TTL.
package silenttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// Env is one server under test.
type Env struct {
	// Target is the server's host:port.
	Target string
	// Open returns a new Backend that reaches the server at addr (the
	// proxy's address, or Target).
	Open func(t *testing.T, addr string) dlock.Backend
}

const (
	// ttl is the TTL of the locks taken through the silent link: long
	// enough that a call held until the lease's end fails the bound.
	ttl = 5 * time.Second
	// lockTTL is the TTL of the silent Lock, whose grant must be released
	// before it.
	lockTTL = 10 * time.Second
	// short is the context of the calls made through the silent link.
	short = time.Second
	// slack is the margin given to a loaded machine on top of each bound.
	slack = 1500 * time.Millisecond
)

// Run runs every scenario as a subtest.
func Run(t *testing.T, env Env) {
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, Env)
	}{{"Lock", Lock}, {"Unlock", Unlock}, {"Extend", Extend}, {"ShorterExtend", ShorterExtend}, {"Close", Close}} {
		t.Run(sc.name, func(t *testing.T) { sc.fn(t, env) })
	}
}

func client(t *testing.T, b dlock.Backend) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b, dlock.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// setup returns the proxy, a client through it and a client that reaches
// the server directly.
func setup(t *testing.T, env Env) (*testserver.Proxy, *dlock.Client, *dlock.Client) {
	t.Helper()
	p := testserver.NewProxy(t, env.Target)
	silent := client(t, env.Open(t, p.Addr()))
	other := client(t, env.Open(t, env.Target))
	return p, silent, other
}

// bounded runs op with a context of `short` and fails the test if it has
// not returned by short + CancelGrace + slack; then it heals the proxy
// (which also ends a call that waits for ever) and returns op's error.
func bounded(t *testing.T, p *testserver.Proxy, what string, op func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- op(ctx) }()
	limit := short + dlock.CancelGrace + slack
	var err error
	select {
	case err = <-done:
		t.Logf("%s returned after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Errorf("%s with a %v context has not returned after %v while the replies are swallowed; want by its context + CancelGrace (%v)",
			what, short, limit, dlock.CancelGrace)
		p.Heal()
		err = <-done
		t.Logf("%s returned %v after it began, once the connections were cut: %v", what, time.Since(start).Round(time.Millisecond), err)
	}
	p.Heal()
	return err
}

// lockedWithin checks that other gets name within limit after since:
// nothing the silent client did holds it longer.
func lockedWithin(t *testing.T, other *dlock.Client, name string, since time.Time, limit time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit+5*time.Second)
	defer cancel()
	l, err := other.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("another client could not lock %q after the silent link: %v", name, err)
	}
	if d := time.Since(since); d > limit {
		t.Errorf("another client got %q %v after the silent call began; want within %v (%s)", name, d, limit, why)
	}
	l.Unlock(context.Background())
}

// Lock: a Lock whose grant reached the server but whose reply never came
// returns by its context plus CancelGrace, not granted, and the grant it
// may have made is released once the link heals, well before its TTL
// (lockTTL) would end it.
func Lock(t *testing.T, env Env) {
	p, silent, other := setup(t, env)
	name := "silent-lock"
	// A first grant through the proxy: the connections are made.
	l, err := silent.Mutex(name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Swallow()
	start := time.Now()
	err = bounded(t, p, "Lock", func(ctx context.Context) error {
		l, err := silent.Mutex(name, dlock.TTL(lockTTL)).Lock(ctx)
		if err == nil {
			l.Unlock(context.Background())
		}
		return err
	})
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Lock through a silent link: %v; want an error matching ErrNotAcquired", err)
	}
	lockedWithin(t, other, name, start, lockTTL-slack, "the grant the silent Lock may have made is released when the link heals")
}

// Unlock: an Unlock whose reply never came returns by its context plus
// CancelGrace, and the lock is free at the latest when its TTL ends.
func Unlock(t *testing.T, env Env) {
	name := "silent-unlock"
	p, l, other, start := heldThenSilent(t, env, name)
	bounded(t, p, "Unlock", l.Unlock)
	lockedWithin(t, other, name, start, ttl+slack, "the TTL")
}

// heldThenSilent locks name through the proxy, then makes the proxy
// swallow every reply; start is when the link went silent.
func heldThenSilent(t *testing.T, env Env, name string) (p *testserver.Proxy, l *dlock.Lease, other *dlock.Client, start time.Time) {
	p, silent, other := setup(t, env)
	l, err := silent.Mutex(name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Swallow()
	return p, l, other, time.Now()
}

// Extend: an Extend whose reply never came returns by its context plus
// CancelGrace with an error, and the lock is free at the latest when the
// TTL of the last renewal that may have reached the server ends.
func Extend(t *testing.T, env Env) {
	name := "silent-extend"
	p, l, other, start := heldThenSilent(t, env, name)
	err := bounded(t, p, "Extend", func(ctx context.Context) error { return l.Extend(ctx, ttl) })
	if err == nil {
		t.Error("Extend through a silent link succeeded")
	}
	// The holder's renewals went on until the proxy healed; let it go.
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	l.Unlock(uctx)
	cancel()
	lockedWithin(t, other, name, start, ttl+slack, "the TTL")
}

// ShorterExtend: an Extend to a shorter TTL whose request reached the
// server but whose reply never came counts as applied: the lease's
// Deadline is at most the shorter TTL after the Extend was sent, and
// another client is never granted the lock while the lease's Err() is nil.
func ShorterExtend(t *testing.T, env Env) {
	const shorter = 2 * time.Second
	p, silent, other := setup(t, env)
	long := min(30*time.Second, silent.MaxTTL())
	if long < 4*shorter {
		t.Skipf("the backend's maximum TTL %v leaves no room for a shorter Extend", long)
	}
	name := "silent-shorter-extend"
	l, err := silent.Mutex(name, dlock.TTL(long)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Swallow()
	err = bounded(t, p, "Extend", func(ctx context.Context) error {
		err := l.Extend(ctx, shorter)
		if dl, sent := l.Deadline(), time.Now(); dl.After(sent.Add(shorter)) {
			t.Errorf("after an Extend(%v) from a %v TTL whose reply was swallowed, Deadline() is %v after the Extend returned; want at most %v: the server may have applied it",
				shorter, long, dl.Sub(sent), shorter)
		}
		return err
	})
	if err == nil {
		t.Error("Extend through a silent link succeeded")
	}
	// The server holds the lock for the shorter TTL, or longer if a
	// renewal of the old TTL reached it since.
	ctx, cancel := context.WithTimeout(context.Background(), 2*shorter+slack)
	defer cancel()
	l2, err := other.Mutex(name).Lock(ctx)
	switch {
	case err == nil:
		if lerr := l.Err(); lerr == nil {
			t.Errorf("another client was granted %q (token %d) while the lease whose Extend(%v) went unanswered (token %d) is valid until %v",
				name, l2.Token(), shorter, l.Token(), time.Until(l.Deadline()))
		}
		l2.Unlock(context.Background())
	case errors.Is(err, dlock.ErrNotAcquired):
		t.Logf("the server kept the first hold (a renewal of the old TTL reached it): safe")
	default:
		t.Errorf("another client's Lock: %v", err)
	}
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	l.Unlock(uctx)
	cancel()
}

// Close: Close of a client that holds a lease and gets no replies returns
// by dlock.CloseTimeout plus CancelGrace, and the lock is free at the
// latest when its TTL ends.
func Close(t *testing.T, env Env) {
	p := testserver.NewProxy(t, env.Target)
	silent, err := dlock.New(env.Open(t, p.Addr()), dlock.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	other := client(t, env.Open(t, env.Target))
	name := "silent-close"
	if _, err := silent.Mutex(name).Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Swallow()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- silent.Close() }()
	limit := dlock.CloseTimeout + dlock.CancelGrace + slack
	select {
	case err := <-done:
		t.Logf("Close returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Errorf("Close has not returned after %v while the replies are swallowed; want by CloseTimeout + CancelGrace (%v)",
			limit, dlock.CloseTimeout+dlock.CancelGrace)
		p.Heal()
		<-done
	}
	p.Heal()
	lockedWithin(t, other, name, start, max(ttl, time.Since(start))+slack, "the TTL, or Close's own time")
}
