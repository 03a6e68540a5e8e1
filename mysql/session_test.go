package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func sessionFactory(dsn string, opts ...mysql.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := mysql.Open(dsn, append(opts, mysql.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}

func TestSessionConformance(t *testing.T) {
	srv := testserver.MariaDB(t, testserver.WithArgs("--max-connections=300"))
	dlocktest.Run(t, sessionFactory(srv.DSN(), mysql.Table("sess_locks")), dlocktest.Names(sessionNames))
}

func sessionClient(t *testing.T, dsn string) *dlock.Client {
	t.Helper()
	b, err := mysql.Open(dsn, mysql.Session())
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

// usedBy returns the connection id holding name's user lock ("" if free).
func usedBy(t *testing.T, srv *testserver.MariaDBServer, name string) string {
	t.Helper()
	rows, err := srv.Query(context.Background(), "", `SELECT COALESCE(IS_USED_LOCK('`+mysql.SessionLockName(mysql.DefaultTable, name)+`'), '')`)
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

// TestSessionKilled: the server KILLs the connection that holds a
// session-mode lock. The holder learns of the loss by its next renewal
// at the latest (Done, Err); the waiter, to which the server hands the
// user lock at once, is granted only once the holder's lease has run out
// by the database's clock — after the holder's Deadline — with a higher
// token.
func TestSessionKilled(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	hc, wc := sessionClient(t, srv.DSN()), sessionClient(t, srv.DSN())
	const ttl = 3 * time.Second
	l, err := hc.Mutex("sess-kill", dlock.TTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := waitLock(t, wc, "sess-kill", ctx, dlock.TTL(ttl))
	id := usedBy(t, srv, "sess-kill")
	if id == "" {
		t.Fatal("the held lock's user lock is free")
	}
	if _, err := srv.Query(ctx, "", "KILL "+id); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	select {
	case <-l.Done():
		t.Logf("loss reported %v after the connection was killed (TTL %v)", time.Since(cut), ttl)
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
	if id := usedBy(t, srv, "sess-kill"); id != "" {
		t.Errorf("connection %s still holds the user lock after the release", id)
	}
}

// TestSessionRestart: the server is killed and restarted while session
// locks are held. Every holder learns of the loss; afterwards the locks
// are free (once the lost leases' rows expire), with higher tokens.
func TestSessionRestart(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	a, b := sessionClient(t, srv.DSN()), sessionClient(t, srv.DSN())
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
		if id := usedBy(t, srv, fmt.Sprint("sess-restart", i)); id != "" {
			t.Errorf("lock %d: connection %s still holds the user lock after the release", i, id)
		}
	}
}

// TestSessionCancelRace: waiters give up at the moment the holder
// releases, again and again. Whether a waiter was granted or not, nothing
// is left behind: no user lock, no owner on the row, and the lock is
// free at once.
func TestSessionCancelRace(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	hc, wc := sessionClient(t, srv.DSN()), sessionClient(t, srv.DSN())
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
	if id := usedBy(t, srv, "sess-cancel"); id != "" {
		t.Errorf("connection %s still holds the user lock after all were released", id)
	}
	rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM dlock_locks WHERE owner <> ''`)
	if err != nil || rows[0][0] != "0" {
		t.Errorf("rows still owned: %v %v", rows, err)
	}
}

// TestSessionURL: ?mode=session selects session mode; a bad mode is an
// error naming the backend.
func TestSessionURL(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	u := "mysql://root@" + srv.Addr() + "/test"
	c, err := dlock.Open(ctx, u+"?mode=session&table=url_sess")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, ok := c.Backend().(*mysql.Backend); !ok || !b.Session() || b.Table() != "url_sess" {
		t.Fatalf("Backend %T (%v) is not in session mode on url_sess", c.Backend(), c.Backend())
	}
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	_, err = dlock.Open(ctx, u+"?mode=sessions")
	t.Logf("bad mode: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql") || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("bad mode: %v; want ErrInvalidOption naming mysql and the value", err)
	}
	_, err = c.Mutex("long", dlock.TTL(time.Hour)).TryLock(ctx)
	t.Logf("TTL above 2 × wait_timeout: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TTL of an hour with wait_timeout 60s: %v, want ErrInvalidOption", err)
	}
}
