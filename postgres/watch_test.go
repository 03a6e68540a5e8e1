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

// TestMigrateAddsValue: a holders table made before elections (no value
// column, no watch triggers) is completed when the Backend opens, its
// rows kept; an election then publishes its value, and a watcher is
// pushed a Proclaim.
func TestMigrateAddsValue(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	raw, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	if _, err := raw.Exec(ctx, `CREATE TABLE old_locks_holders (name TEXT COLLATE "C" NOT NULL, owner TEXT NOT NULL,
	weight INTEGER NOT NULL, holds INTEGER NOT NULL, token BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (name, owner));
INSERT INTO old_locks_holders VALUES ('old', 'o', 1, 1, 1, 0)`); err != nil {
		t.Fatal(err)
	}
	c := openClient(t, srv.TestDSN(), postgres.Table("old_locks"))
	var v string
	if err := raw.QueryRow(ctx, `SELECT value FROM old_locks_holders WHERE name = 'old'`).Scan(&v); err != nil || v != "" {
		t.Fatalf("the old row after Migrate: value %q, %v", v, err)
	}
	e := c.Election("e")
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	obs := openClient(t, srv.TestDSN(), postgres.Table("old_locks")).Election("e").Observe(octx)
	// Well within the leader's TTL (30 s), after which the watch would
	// read again without a push.
	next := func() dlock.Leader {
		select {
		case ld := <-obs:
			return ld
		case <-time.After(10 * time.Second):
			t.Fatal("Observe sent nothing")
		}
		return dlock.Leader{}
	}
	if ld := next(); ld.Value != "v1" || ld.Term != l.Token() {
		t.Fatalf("observed %+v", ld)
	}
	if err := e.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if ld := next(); ld.Value != "v2" {
		t.Fatalf("after Proclaim observed %+v", ld)
	}
}
