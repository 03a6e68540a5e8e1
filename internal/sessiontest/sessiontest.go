// Package sessiontest holds the fault scenarios of the SQL server
// backends (postgres, mysql), run by each backend's tests against a real
// server of its own: those of session mode (postgres.Session,
// mysql.Session) through an [Env], those of lease-table mode through a
// [LeaseEnv].
package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Env is one database server under test, with backends in session mode.
type Env struct {
	// Client returns a new Client on a new session-mode Backend, closed at
	// clean-up.
	Client func(t *testing.T) *dlock.Client
	// Cut ends, from the server, the connection that holds the advisory
	// lock of the lock name (pg_terminate_backend, KILL).
	Cut func(t *testing.T, name string)
	// Holder returns the server's id of the connection holding the
	// advisory lock of name, or "" if none does.
	Holder func(t *testing.T, name string) string
	// Query runs a query on the server's test database and returns the
	// first column of its first row.
	Query func(t *testing.T, query string) string
	// Server is the server's process, killed and restarted on the same
	// data by Restart.
	Server Server
}

// Server is a database server's process.
type Server interface {
	Kill() error
	Restart() error
}

// lockAndRestart takes n locks, named prefix and 0 to n-1, with a 2s TTL
// on c, then kills and restarts srv while they are held.
func lockAndRestart(t *testing.T, c *dlock.Client, srv Server, prefix string, n int) []*dlock.Lease {
	t.Helper()
	ctx := context.Background()
	var leases []*dlock.Lease
	for i := range n {
		l, err := c.Mutex(fmt.Sprint(prefix, i), dlock.TTL(2*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	return leases
}

// Run runs every scenario as a subtest, each on a server of its own
// from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, Env)
	}{{"Cut", Cut}, {"Restart", Restart}, {"CancelRace", CancelRace}, {"ReentryElsewhere", ReentryElsewhere}, {"ElectionCut", ElectionCut}} {
		t.Run(sc.name, func(t *testing.T) { sc.fn(t, newEnv(t)) })
	}
}

// lockAt is a lease with the time it was granted.
type lockAt struct {
	l  *dlock.Lease
	at time.Time
}

// waitLock starts Lock in a goroutine and returns once it waits.
func waitLock(t *testing.T, c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) <-chan lockAt {
	t.Helper()
	got := make(chan lockAt, 1)
	waiting := make(chan struct{})
	var once sync.Once
	m := c.Mutex(name, append(opts, dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) }))...)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- lockAt{l, time.Now()}
	}()
	select {
	case <-waiting:
	case r := <-got:
		t.Fatalf("Lock did not wait: %v", r.l)
	}
	return got
}

func (env Env) noAdvisory(t *testing.T, name string) {
	t.Helper()
	if id := env.Holder(t, name); id != "" {
		t.Errorf("connection %s still holds the advisory lock of %q after the release", id, name)
	}
}

// Cut: the server ends the connection that holds a lock. The holder
// learns of the loss (Done, Err) by its next renewal at the latest; the
// server hands the advisory lock to the waiter, which is granted only once
// the holder's lease has run out by the database's clock — after the
// holder's Deadline — with a higher token.
func Cut(t *testing.T, env Env) {
	ctx := context.Background()
	hc, wc := env.Client(t), env.Client(t)
	const ttl = 3 * time.Second
	l, err := hc.Mutex("sess-cut", dlock.TTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := waitLock(t, wc, "sess-cut", ctx, dlock.TTL(ttl))
	env.Cut(t, "sess-cut")
	cut := time.Now()
	select {
	case <-l.Done():
		t.Logf("loss reported %v after the connection was cut (TTL %v)", time.Since(cut), ttl)
	case <-time.After(2 * ttl):
		t.Fatal("the loss of the holder's connection was not reported")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", err)
	}
	deadline := l.Deadline()
	r := <-got
	if r.l == nil {
		t.FailNow()
	}
	t.Logf("the waiter was granted %v after the cut, %v after the holder's deadline", r.at.Sub(cut), r.at.Sub(deadline))
	if r.at.Before(deadline) {
		t.Errorf("the waiter was granted at %v, before the lost holder's deadline %v", r.at, deadline)
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("token %d after %d", r.l.Token(), l.Token())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the lost lease: %v, want ErrLeaseLost", err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	env.noAdvisory(t, "sess-cut")
}

// Restart: the server is killed and restarted while locks are held.
// Every holder learns of the loss; afterwards the locks are free (once
// the lost leases' rows expire), with higher tokens, and no advisory lock
// is left.
func Restart(t *testing.T, env Env) {
	ctx := context.Background()
	a, b := env.Client(t), env.Client(t)
	leases := lockAndRestart(t, a, env.Server, "sess-restart", 3)
	for i, l := range leases {
		name := fmt.Sprint("sess-restart", i)
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("lock %d: the loss of the session was not reported", i)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("lock %d: Err() = %v", i, err)
		}
		err := l.Unlock(ctx)
		t.Logf("lock %d: %v; unlock: %v", i, l.Err(), err)
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		l2, err := b.Mutex(name, dlock.TTL(2*time.Second)).Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("lock %d after the restart: %v", i, err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("lock %d: token %d after %d", i, l2.Token(), l.Token())
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Errorf("lock %d: %v", i, err)
		}
		env.noAdvisory(t, name)
	}
}

// CancelRace: waiters give up at the moment the holder releases (just
// before or just after), again and again. Whether a waiter was granted or
// not, nothing is left behind: no advisory lock, no owned row, and the
// lock is free at once.
func CancelRace(t *testing.T, env Env) {
	ctx := context.Background()
	hc, wc := env.Client(t), env.Client(t)
	granted := 0
	for i := range 30 {
		l, err := hc.Mutex("sess-cancel").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		res := waitLock(t, wc, "sess-cancel", wctx)
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if i%2 == 0 {
			go cancel()
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			time.Sleep(time.Duration(i%3) * 300 * time.Microsecond)
			cancel()
		}
		if r := <-res; r.l != nil {
			granted++
			if err := r.l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
	}
	t.Logf("%d of 30 waiters were granted before they gave up", granted)
	l, err := hc.Mutex("sess-cancel").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the races: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	env.noAdvisory(t, "sess-cancel")
	if n := env.Query(t, `SELECT count(*) FROM dlock_locks WHERE owner <> ''`); n != "0" {
		t.Errorf("%s rows still owned after all were released", n)
	}
}

// ReentryElsewhere: an explicit owner re-enters on another Backend
// (another process), whose hold lives on the row only; when the outer
// hold, which carried the advisory lock, is released first, the lock
// stays held until the inner one is released too.
func ReentryElsewhere(t *testing.T, env Env) {
	ctx := context.Background()
	a, a2, b := env.Client(t), env.Client(t), env.Client(t)
	outer, err := a.Mutex("sess-re", dlock.Owner("job-42")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := a2.Mutex("sess-re", dlock.Owner("job-42")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 {
		t.Fatalf("re-entry: token %d holds %d, want %d and 2", inner.Token(), inner.Holds(), outer.Token())
	}
	got := waitLock(t, b, "sess-re", ctx)
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		t.Fatalf("granted (token %d) while the inner hold was held", r.l.Token())
	case <-time.After(500 * time.Millisecond):
	}
	if err := inner.Err(); err != nil {
		t.Fatalf("inner hold: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.l.Token() <= outer.Token() {
			t.Errorf("token %d after %d", r.l.Token(), outer.Token())
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not granted after the last hold was released")
	}
	env.noAdvisory(t, "sess-re")
}
