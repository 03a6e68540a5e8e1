package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// rwLocks returns a function that counts the advisory locks of name in
// pg_locks in mode ("ShareLock", "ExclusiveLock") that are granted or
// not, and one that terminates the connections holding it in mode.
func rwLocks(t *testing.T, srv *testserver.PostgresServer, name string) (count func(mode string, granted bool) int, cut func(mode string) int) {
	k := uint64(postgres.SessionKey(postgres.DefaultTable, name))
	where := fmt.Sprintf("locktype = 'advisory' AND classid = %d AND objid = %d AND objsubid = 1", k>>32, k&0xffffffff)
	one := func(q string) int {
		t.Helper()
		rows, err := srv.Query(context.Background(), "test", q)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fmt.Sscan(rows[0][0], &n)
		return n
	}
	count = func(mode string, granted bool) int {
		return one(fmt.Sprintf("SELECT count(*) FROM pg_locks WHERE %s AND mode = '%s' AND granted = %v", where, mode, granted))
	}
	cut = func(mode string) int {
		return one(fmt.Sprintf("SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE %s AND mode = '%s' AND granted", where, mode))
	}
	return count, cut
}

// eventually waits up to 30 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionRWServer: in session mode readers hold the name's advisory
// key shared and a waiting writer waits for it exclusive in the server;
// Inspect shows one row per reader; a reader whose connection the server
// ends is reported lost at once, and its row still keeps the writer out
// until it expires by the database's clock; the writer's token is above
// every reader's.
func TestSessionRWServer(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	const name = "rw-server"
	count, cut := rwLocks(t, srv, name)
	c1 := openClient(t, srv.TestDSN(), postgres.Session())
	c2 := openClient(t, srv.TestDSN(), postgres.Session())
	c3 := openClient(t, srv.TestDSN(), postgres.Session())
	r1, err := c1.RWMutex(name, dlock.TTL(3*time.Second)).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := count("ShareLock", true); n != 1 {
		t.Fatalf("%d shared advisory locks after one RLock, want 1", n)
	}
	// Only r1 holds: terminate its connection.
	if n := cut("ShareLock"); n != 1 {
		t.Fatalf("%d connections terminated, want 1", n)
	}
	select {
	case <-r1.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the reader whose connection ended was not reported lost")
	}
	if err := r1.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("the cut reader: Err() = %v, want ErrLeaseLost", err)
	}
	r2, err := c2.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := c2.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// r1's row lives until its TTL, r2's beside it.
	if len(infos) != 2 {
		t.Fatalf("Inspect: %+v, want a row per holder (the cut reader's until it expires, and r2)", infos)
	}
	for _, in := range infos {
		if in.Kind != dlock.KindRWMutex || in.Weight != 1 || in.Limit != dlock.RWLimit {
			t.Errorf("Inspect row %+v: want a reader of a read-write lock", in)
		}
	}
	wres := make(chan *dlock.Lease, 1)
	werr := make(chan error, 1)
	go func() {
		w, err := c3.RWMutex(name).Lock(ctx)
		werr <- err
		wres <- w
	}()
	eventually(t, "the writer waiting in the server", func() bool { return count("ExclusiveLock", false) == 1 })
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	w := <-wres
	if w.Token() <= r2.Token() || r2.Token() <= r1.Token() {
		t.Errorf("tokens r1 %d, r2 %d, writer %d do not increase", r1.Token(), r2.Token(), w.Token())
	}
	if n := count("ExclusiveLock", true); n != 1 {
		t.Errorf("%d exclusive advisory locks held by the writer, want 1", n)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if infos, err := c3.Inspect(ctx, name); err != nil || len(infos) != 0 {
		t.Errorf("after the last release: %+v, %v", infos, err)
	}
	if n := count("ExclusiveLock", true) + count("ShareLock", true); n != 0 {
		t.Errorf("%d advisory locks left after the last release", n)
	}
}

// TestSessionRWDowngradeServer: a writer downgrades while a writer and
// then a reader wait in the server: its connection ends up holding the key
// shared alone, the waiting writer still waits and the reader queued behind
// it too (head of line); the writer is granted when the downgraded reader
// leaves, and the reader after it.
func TestSessionRWDowngradeServer(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	const name = "rw-down"
	count, _ := rwLocks(t, srv, name)
	c1 := openClient(t, srv.TestDSN(), postgres.Session())
	c2 := openClient(t, srv.TestDSN(), postgres.Session())
	c3 := openClient(t, srv.TestDSN(), postgres.Session())
	w, err := c1.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *dlock.Lease
		err error
	}
	wch, rch := make(chan res, 1), make(chan res, 1)
	go func() { l, err := c2.RWMutex(name).Lock(ctx); wch <- res{l, err} }()
	eventually(t, "the second writer waiting", func() bool { return count("ExclusiveLock", false) == 1 })
	go func() { l, err := c3.RWMutex(name).RLock(ctx); rch <- res{l, err} }()
	eventually(t, "the reader waiting", func() bool { return count("ShareLock", false) == 1 })
	if err := w.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	if s, x := count("ShareLock", true), count("ExclusiveLock", true); s != 1 || x != 0 {
		t.Fatalf("after the downgrade: %d shared and %d exclusive held, want 1 and 0", s, x)
	}
	select {
	case r := <-wch:
		t.Fatalf("the waiting writer came in at the downgrade: %v", r.err)
	case r := <-rch:
		t.Fatalf("the reader queued behind the waiting writer came in at the downgrade: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wr := <-wch
	if wr.err != nil {
		t.Fatal(wr.err)
	}
	select {
	case r := <-rch:
		t.Fatalf("the reader came in while the writer held: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := wr.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rr := <-rch
	if rr.err != nil {
		t.Fatal(rr.err)
	}
	if !(w.Token() < wr.l.Token() && wr.l.Token() < rr.l.Token()) {
		t.Errorf("tokens %d, %d, %d do not increase", w.Token(), wr.l.Token(), rr.l.Token())
	}
	if err := rr.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
