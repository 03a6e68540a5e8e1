package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func TestSessionConformance(t *testing.T) {
	srv := testserver.Postgres(t, testserver.WithArgs("-c", "max_connections=300"))
	dlocktest.Run(t, sessionFactory(srv.TestDSN(), postgres.Table("sess_locks")), dlocktest.Names(sessionNames))
}

func sessionFactory(dsn string, opts ...postgres.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := postgres.Open(dsn, append(opts, postgres.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}

func sessionClient(t *testing.T, dsn string) *dlock.Client {
	t.Helper()
	b, err := postgres.Open(dsn, postgres.Session())
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// advisoryLocks counts the advisory locks on the server, granted or
// waited for.
func advisoryLocks(t *testing.T, srv *testserver.PostgresServer) string {
	t.Helper()
	rows, err := srv.Query(context.Background(), "test", `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`)
	if err != nil {
		t.Fatal(err)
	}
	return rows[0][0]
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
		if err != nil {
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

// TestSessionTerminated: the server ends the connection that holds a
// session-mode lock (pg_terminate_backend). The holder learns of the loss
// at once (Done, Err), before its next renewal; the server hands the
// advisory lock to the waiter, which is granted only once the holder's
// lease has run out by the database's clock — after the holder's
// Deadline — and with a higher token.
func TestSessionTerminated(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	hc, wc := sessionClient(t, srv.TestDSN()), sessionClient(t, srv.TestDSN())
	const ttl = 3 * time.Second
	l, err := hc.Mutex("sess-term", dlock.TTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := waitLock(t, wc, "sess-term", ctx, dlock.TTL(ttl))
	rows, err := srv.Query(ctx, "test", `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted`)
	if err != nil || rows[0][0] != "1" {
		t.Fatalf("terminating the holder's connection: %v %v", rows, err)
	}
	cut := time.Now()
	select {
	case <-l.Done():
		t.Logf("loss reported %v after the connection was terminated (TTL %v)", time.Since(cut), ttl)
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
	if n := advisoryLocks(t, srv); n != "0" {
		t.Errorf("%s advisory locks left after all were released", n)
	}
}

// TestSessionRestart: the server is killed and restarted while session
// locks are held. Every holder learns of the loss; afterwards the locks
// are free (once the lost leases' rows expire), with higher tokens, and
// no advisory lock is left over.
func TestSessionRestart(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	a, b := sessionClient(t, srv.TestDSN()), sessionClient(t, srv.TestDSN())
	var leases []*dlock.Lease
	for i := range 3 {
		l, err := a.Mutex(fmt.Sprint("sess-restart", i), dlock.TTL(2*time.Second)).Lock(ctx)
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
	for i, l := range leases {
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
		l2, err := b.Mutex(fmt.Sprint("sess-restart", i), dlock.TTL(2*time.Second)).Lock(wctx)
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
	}
	if n := advisoryLocks(t, srv); n != "0" {
		t.Errorf("%s advisory locks left after all were released", n)
	}
}

// TestSessionCancelRace: waiters give up at the moment the holder
// releases, again and again. Whether a waiter was granted or not, nothing
// is left behind: no advisory lock, no owner on the row, and the lock is
// free at once.
func TestSessionCancelRace(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	hc, wc := sessionClient(t, srv.TestDSN()), sessionClient(t, srv.TestDSN())
	granted := 0
	for i := range 30 {
		l, err := hc.Mutex("sess-cancel").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan *dlock.Lease, 1)
		waiting := make(chan struct{})
		var once sync.Once
		go func() {
			l, _ := wc.Mutex("sess-cancel", dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) })).Lock(wctx)
			res <- l
		}()
		<-waiting
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
		if wl := <-res; wl != nil {
			granted++
			if err := wl.Unlock(ctx); err != nil {
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
	l.Unlock(ctx)
	if n := advisoryLocks(t, srv); n != "0" {
		t.Errorf("%s advisory locks left after all were released", n)
	}
	rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM dlock_locks WHERE owner <> ''`)
	if err != nil || rows[0][0] != "0" {
		t.Errorf("rows still owned: %v %v", rows, err)
	}
}

// TestSessionReentryElsewhere: an explicit owner re-enters on another
// Backend (another process), whose hold lives on the row only; when the
// outer hold, which carried the advisory lock, is released first, the
// lock stays held until the inner one is released too.
func TestSessionReentryElsewhere(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	a, a2, b := sessionClient(t, srv.TestDSN()), sessionClient(t, srv.TestDSN()), sessionClient(t, srv.TestDSN())
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
		r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("not granted after the last hold was released")
	}
}

// TestSessionURL: ?mode=session selects session mode; a bad mode is an
// error naming the backend.
func TestSessionURL(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	c, err := dlock.Open(ctx, srv.TestDSN()+"&mode=session&table=url_sess")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, ok := c.Backend().(*postgres.Backend); !ok || !b.Session() || b.Table() != "url_sess" {
		t.Fatalf("Backend %T (%v) is not in session mode on url_sess", c.Backend(), c.Backend())
	}
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	u, _ := url.Parse(srv.TestDSN() + "&mode=lease")
	_, opts, err := postgres.ParseURL(u)
	if err != nil || len(opts) != 1 {
		t.Errorf("ParseURL(mode=lease): %v, %v", opts, err)
	}
	_, err = dlock.Open(ctx, srv.TestDSN()+"&mode=sessions")
	t.Logf("bad mode: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "postgres") || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("bad mode: %v; want ErrInvalidOption naming postgres and the value", err)
	}
}

// TestSessionStatements counts the statements of session mode at the
// driver.
func TestSessionStatements(t *testing.T) {
	srv := testserver.Postgres(t)
	cfg, err := pgxpool.ParseConfig(srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	cnt := new(counter)
	cfg.ConnConfig.Tracer = cnt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.NewPool(pool, postgres.Session())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	req := dlock.Request{Name: "stmts", Owner: "o", TTL: 10 * time.Second}
	measure := func(what string, want int64, fn func()) {
		before := cnt.n.Load()
		fn()
		n := cnt.n.Load() - before
		t.Logf("%s: %d statement(s)", what, n)
		if n != want {
			t.Errorf("%s took %d statements, want %d", what, n, want)
		}
	}
	for range 2 { // warm up
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
	}
	var g dlock.Grant
	measure("acquire", 1, func() {
		if g, _, err = b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	var g2 dlock.Grant
	measure("re-entry", 1, func() {
		if g2, _, err = b.Acquire(ctx, req); err != nil || g2.Token != g.Token || g2.Count != 2 {
			t.Fatalf("re-entry: %+v, %v", g2, err)
		}
	})
	measure("inner release", 1, func() {
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g2.Token, Handle: g2.Handle}); err != nil {
			t.Fatal(err)
		}
	})
	measure("renew", 1, func() {
		if err := b.Renew(ctx, h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	measure("try while held (refused, with the holder)", 2, func() {
		_, _, err := b.Acquire(ctx, dlock.Request{Name: req.Name, Owner: "other", TTL: time.Second})
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	})
	measure("release", 1, func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
}
