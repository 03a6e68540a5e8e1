package postgres_test

import (
	"context"
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
	open := func() *dlock.Client {
		b, err := postgres.Open(ctx, srv.TestDSN(), postgres.Table("quiet_locks"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := dlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hc := open()
	defer hc.Close()
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
	got := make(chan error, 1)
	go func() {
		l, err := wc.Mutex("busy").Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter listens
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
