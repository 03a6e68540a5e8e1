package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqlite"
)

// TestWeightedForeignHolders: a holders row edited by hand into an
// impossible state (more weight than the limit, a negative count) makes a
// request of its name fail with ErrForeignData naming the name, and
// nothing is written.
func TestWeightedForeignHolders(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	b, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	held, err := c.Semaphore("hand", 2, dlock.TTL(time.Minute)).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := func() (n int) {
		t.Helper()
		if err := db.QueryRow(`SELECT count(*) FROM dlock_locks_holders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, edit := range []string{
		`UPDATE dlock_locks_holders SET weight = 5`,
		`UPDATE dlock_locks_holders SET weight = 1, holds = -1`,
		`UPDATE dlock_locks_holders SET holds = 1, token = 'x'`,
	} {
		if _, err := db.Exec(edit); err != nil {
			t.Fatal(err)
		}
		l, err := c.Semaphore("hand", 2).TryAcquire(ctx)
		if err == nil {
			l.Unlock(ctx)
		}
		if !errors.Is(err, dlock.ErrForeignData) {
			t.Errorf("after %s: %v, want ErrForeignData", edit, err)
		}
		if n := rows(); n != 1 {
			t.Errorf("after %s and a refused request: %d holder rows, want 1", edit, n)
		}
	}
	held.Unlock(ctx) // lost: its row was edited
}

// TestWeightedTokensAcrossKinds: a name's tokens increase across a mutex,
// a semaphore and a read-write lock granted at different times, through
// the deletion of its rows in between.
func TestWeightedTokensAcrossKinds(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last uint64
	for i, lock := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex("k").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.Semaphore("k", 3).Acquire(ctx) },
		func() (*dlock.Lease, error) { return c.RWMutex("k").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.Mutex("k").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.RWMutex("k").RLock(ctx) },
	} {
		l, err := lock()
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if l.Token() <= last {
			t.Errorf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reclaim(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
