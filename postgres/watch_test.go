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

// nextHolders reads hs until a state with n holders (skipping the errors
// a broken subscription reports), and returns it.
func nextHolders(t *testing.T, hs <-chan dlock.Holders, n int) dlock.Holders {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case h, ok := <-hs:
			if !ok {
				t.Fatalf("the watch ended waiting for %d holders", n)
			}
			if h.Err == nil && len(h.Holders) == n {
				return h
			}
		case <-timeout:
			t.Fatalf("the watch never showed %d holders", n)
		}
	}
}

// TestWatchResumesAfterListenerDrop: the watching process's listening
// connection is terminated (pg_terminate_backend) and a lock is taken by
// another process meanwhile; the watch subscribes again on a new
// connection, reports the holder it missed, and is then pushed the next
// change. The TTL is long, so no expiry timer hides a watch that stopped.
func TestWatchResumesAfterListenerDrop(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	wc := openClient(t, srv.TestDSN(), postgres.Table("watch_locks"))
	ac := openClient(t, srv.TestDSN(), postgres.Table("watch_locks"))
	if _, ok := wc.Backend().(dlock.Watcher); !ok {
		t.Fatal("the postgres Backend is no dlock.Watcher")
	}
	raw, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hs, err := wc.Watch(wctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	nextHolders(t, hs, 0)
	waitListeners(t, raw, "watch_locks_watchers", 1)

	if _, err := raw.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM watch_locks_listeners`); err != nil {
		t.Fatal(err)
	}
	l, err := ac.Mutex("w", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := nextHolders(t, hs, 1); h.Holders[0].Owner != l.Owner() || h.Holders[0].Token != l.Token() {
		t.Errorf("after the drop the watch showed %+v, want owner %s token %d", h.Holders[0], l.Owner(), l.Token())
	}
	// The new subscription is pushed the next change.
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	nextHolders(t, hs, 0)
	var n int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM watch_locks_watchers w JOIN watch_locks_listeners l USING (pid)`).Scan(&n); err != nil || n != 1 {
		t.Errorf("watchers rows of live listeners: %d, %v; want 1", n, err)
	}
	cancel()
	for range hs {
	}
}

// TestWatchSessionMode: in session mode a watch is pushed a mutex's grant
// and release by another process (the lease row's triggers).
func TestWatchSessionMode(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	wc := openClient(t, srv.TestDSN(), postgres.Session())
	ac := openClient(t, srv.TestDSN(), postgres.Session())
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hs, err := wc.Watch(wctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	nextHolders(t, hs, 0)
	l, err := ac.Mutex("s", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := nextHolders(t, hs, 1); h.Holders[0].Token != l.Token() {
		t.Errorf("watch showed %+v, want token %d", h.Holders[0], l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	nextHolders(t, hs, 0)
}
