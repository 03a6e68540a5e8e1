package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5"
)

// TestSessionFairMark: a fair waiter in session mode queues after the
// fair waiters whose Acquire returned before its own began, without a
// second connection. Such a waiter has marked its connection (a shared
// advisory lock on the two-int4 form of the key) and may not have
// reached the server's queue yet; a later fair waiter waits until it has.
// Here a plain connection plays that waiter: it takes the mark and
// queues only later. The fair waiter's Acquire returns after that, it
// is granted after the connection, and no mark is left behind.
func TestSessionFairMark(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	const table, name = "mark_locks", "m"
	open := func() *postgres.Backend {
		b, err := postgres.Open(ctx, srv.TestDSN(), postgres.Session(), postgres.Table(table))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	hb, wb := open(), open()
	ttl := 30 * time.Second
	g, _, err := hb.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	key := postgres.SessionKey(table, name)
	hi, lo := int32(uint32(uint64(key)>>32)), int32(uint32(uint64(key)))
	early, err := pgx.Connect(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close(ctx)
	if _, err := early.Exec(ctx, `SELECT pg_advisory_lock_shared($1, $2)`, hi, lo); err != nil {
		t.Fatal(err)
	}

	type result struct {
		w   dlock.Waiter
		err error
	}
	acquired := make(chan result, 1)
	go func() {
		_, w, err := wb.Acquire(ctx, dlock.Request{Name: name, Owner: "fair", TTL: ttl, Fair: true, Wait: true})
		acquired <- result{w, err}
	}()
	select {
	case r := <-acquired:
		t.Fatalf("fair Acquire returned (%v) while a connection marked before it had not queued", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	// The early waiter queues now (behind the holder) and drops its mark
	// once granted, as the Lock statement does.
	queued := make(chan error, 1)
	go func() {
		_, err := early.Exec(ctx, `SELECT pg_advisory_lock($1), pg_advisory_unlock_shared($2, $3)`, key, hi, lo)
		queued <- err
	}()
	r := <-acquired
	if !errors.Is(r.err, dlock.ErrNotAcquired) || r.w == nil {
		t.Fatalf("fair Acquire: %v, waiter %v; want refused with a waiter", r.err, r.w)
	}
	if err := hb.Release(ctx, dlock.Hold{Name: name, Owner: "holder", Token: g.Token, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("the early waiter: %v", err)
	}
	// The early waiter holds the advisory lock: the fair one still waits.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	for wctx.Err() == nil {
		if err := r.w.Wait(wctx); err == nil {
			if _, err := r.w.Acquire(ctx); err == nil {
				t.Fatal("the fair waiter was granted before the waiter marked ahead of it")
			}
		}
	}
	cancel()
	if _, err := early.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var fg dlock.Grant
	for {
		if err := r.w.Wait(wctx); err != nil {
			t.Fatalf("fair waiter: %v", err)
		}
		if fg, err = r.w.Acquire(ctx); err == nil {
			break
		}
	}
	var marks int
	if err := early.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid`, uint64(key)>>32, uint64(key)&0xffffffff).Scan(&marks); err != nil {
		t.Fatal(err)
	}
	if marks != 0 {
		t.Errorf("%d marks left while the fair waiter holds the lock, want 0", marks)
	}
	if err := wb.Release(ctx, dlock.Hold{Name: name, Owner: "fair", Token: fg.Token, Handle: fg.Handle}); err != nil {
		t.Fatal(err)
	}
}
