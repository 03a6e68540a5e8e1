package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5"
)

// TestNotifyOnlyWhileListened: a release sends no NOTIFY while no Backend
// listens (a connection that LISTENs without registering hears nothing),
// one while another Backend's waiter listens, and the listening
// connection's row is gone once that Backend is closed.
func TestNotifyOnlyWhileListened(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	open := func() *dlock.Client { return openClient(t, srv.TestDSN(), postgres.Table("quiet_locks")) }
	hc := open()
	raw, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	if _, err := raw.Exec(ctx, "LISTEN quiet_locks"); err != nil {
		t.Fatal(err)
	}
	heard := func() bool {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := raw.WaitForNotification(wctx)
		return err == nil
	}
	l, err := hc.Mutex("quiet").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if heard() {
		t.Error("a release notified while no Backend listened")
	}

	wc := open()
	l, err = hc.Mutex("busy", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(wc, "busy")
	waitListeners(t, raw, "quiet_locks_listeners", 1) // the waiter listens
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !heard() {
		t.Error("a release did not notify while a waiter listened")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if err := wc.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM quiet_locks_listeners").Scan(&n); err != nil || n != 0 {
		t.Errorf("listeners rows after Close: %d, %v", n, err)
	}
}

// lockAndUnlock locks name with c and unlocks it, in a goroutine, and
// sends the outcome on the channel it returns.
func lockAndUnlock(c *dlock.Client, name string) chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Mutex(name).Lock(context.Background())
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	return got
}

// waitListeners waits until table has n rows.
func waitListeners(t *testing.T, conn *pgx.Conn, table string, n int) {
	t.Helper()
	var got int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
	}
	t.Fatalf("%s has %d rows, want %d", table, got, n)
}

// TestListenersOfOtherRoles: a Backend that starts listening as one role
// keeps the row of a live listener of another role, whose backend_start
// pg_stat_activity hides from it, so that listener's waiters are still
// woken by releases.
func TestListenersOfOtherRoles(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	for _, q := range []string{
		"DROP ROLE IF EXISTS dlock_role_a", "DROP ROLE IF EXISTS dlock_role_b",
		"CREATE ROLE dlock_role_a LOGIN", "CREATE ROLE dlock_role_b LOGIN",
		"GRANT ALL ON SCHEMA public TO dlock_role_a, dlock_role_b",
	} {
		if _, err := srv.Query(ctx, "test", q); err != nil {
			t.Fatal(q, ": ", err)
		}
	}
	dsn := func(role string) string { return strings.Replace(srv.TestDSN(), "postgres@", role+"@", 1) }
	admin, err := postgres.Open(ctx, srv.TestDSN(), postgres.Table("roles_locks"))
	if err != nil {
		t.Fatal(err)
	}
	admin.Close()
	for _, q := range []string{
		"GRANT ALL ON roles_locks, roles_locks_waiters, roles_locks_fence, roles_locks_listeners, roles_locks_watchers TO dlock_role_a, dlock_role_b",
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO dlock_role_a, dlock_role_b",
	} {
		if _, err := srv.Query(ctx, "test", q); err != nil {
			t.Fatal(q, ": ", err)
		}
	}
	open := func(role string) *dlock.Client {
		return openClient(t, dsn(role), postgres.Table("roles_locks"), postgres.NoMigrate())
	}
	raw, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	// A holder and a waiter of role a: a's waiter listens.
	a, a2 := open("dlock_role_a"), open("dlock_role_a")
	held, err := a.Mutex("x", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(a2, "x")
	waitListeners(t, raw, "roles_locks_listeners", 1)
	// A waiter of role b starts listening too, and registers.
	b := open("dlock_role_b")
	bheld, err := a.Mutex("y", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bgot := lockAndUnlock(b, "y")
	waitListeners(t, raw, "roles_locks_listeners", 2)
	// a's waiter is woken by the release, long before the minute's TTL.
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bheld.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{got, bgot} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not woken by the release")
		}
	}
}

// TestWaitingProcessOneConnection: a Backend whose locks are contended
// holds one server connection while it waits and hands off: its
// statements borrow the LISTEN connection while that waits. (It held two
// before, so 64 waiting processes needed more than the server's default
// 100 connections.)
func TestWaitingProcessOneConnection(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	raw, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			app := "dlock-one-conn-" + map[bool]string{false: "d", true: "f"}[fair]
			hc := openClient(t, srv.TestDSN(), postgres.Table("one_conn"))
			wc := openClient(t, srv.TestDSN()+"&application_name="+app, postgres.Table("one_conn"))
			conns := func() int {
				var n int
				if err := raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.Fair())
			}
			most := 0
			for range 20 {
				h, err := hc.Mutex("busy", opts...).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() {
					l, err := wc.Mutex("busy", opts...).Lock(ctx)
					if err == nil {
						err = l.Unlock(ctx)
					}
					got <- err
				}()
				time.Sleep(20 * time.Millisecond) // the waiter waits
				most = max(most, conns())
				if err := h.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				most = max(most, conns())
			}
			if most != 1 {
				t.Errorf("the waiting Backend held up to %d connections, want 1", most)
			}
		})
	}
}
