package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/sqlite"
)

// TestFileDeleted: the database file deleted (rm locks.db, with or without
// its -wal and -shm) or replaced while a lock is held. A process that opens
// the path afterwards is granted the lock in the new file; the holder
// learns at its next renewal that its lease is lost, its Backend refuses
// to grant from the old file, and the new file's tokens are above every
// token of the old one.
func TestFileDeleted(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(path string) error
	}{
		{"rm", os.Remove},
		{"rm-all", func(path string) error {
			return errors.Join(os.Remove(path), os.Remove(path+"-wal"), os.Remove(path+"-shm"))
		}},
		{"replaced", func(path string) error {
			other := path + ".new"
			if err := os.WriteFile(other, nil, 0o644); err != nil {
				return err
			}
			return os.Rename(other, path)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "locks.db")
			old, err := sqlite.Open(ctx, path, sqlite.PrivateLocal())
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			req := dlock.Request{Name: "job", Owner: "first", TTL: time.Minute}
			var g dlock.Grant
			for range 3 { // a few grants, so that the old file's token is above its first
				if g, _, err = old.Acquire(ctx, req); err != nil {
					t.Fatal(err)
				}
				if err := old.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}); err != nil {
					t.Fatal(err)
				}
			}
			g, _, err = old.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			held := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}
			_, w, err := old.Acquire(ctx, dlock.Request{Name: "job", Owner: "waiter", TTL: time.Minute, Wait: true})
			if w == nil {
				t.Fatalf("Acquire of a held lock: no waiter (%v)", err)
			}
			defer w.Cancel(context.Background())

			if err := tc.gone(path); err != nil {
				t.Fatal(err)
			}
			b, err := sqlite.Open(ctx, path, sqlite.PrivateLocal())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			g2, _, err := b.Acquire(ctx, dlock.Request{Name: "job", Owner: "second", TTL: time.Minute})
			if err != nil {
				t.Fatalf("Acquire on the new file: %v", err)
			}
			if g2.Token <= g.Token {
				t.Errorf("the new file's first grant has token %d; the old file's holder has %d: tokens went back", g2.Token, g.Token)
			}

			err = old.Renew(ctx, held, time.Minute)
			if !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Renew after the file was %s: %v; want ErrLeaseLost", tc.name, err)
			} else if !strings.Contains(err.Error(), path) {
				t.Errorf("Renew: %v; want the path named", err)
			}
			if errs := old.RenewBatch(ctx, []dlock.Renewal{{Hold: held, TTL: time.Minute}}); !errors.Is(errs[0], dlock.ErrLeaseLost) {
				t.Errorf("RenewBatch after the file was %s: %v; want ErrLeaseLost", tc.name, errs[0])
			}
			if _, err := w.Acquire(ctx); !errors.Is(err, dlock.ErrBackendUnavailable) {
				t.Errorf("a waiter's attempt on the old Backend after the file was %s: %v; want ErrBackendUnavailable", tc.name, err)
			}
			if _, _, err := old.Acquire(ctx, dlock.Request{Name: "other", Owner: "first", TTL: time.Minute}); !errors.Is(err, dlock.ErrBackendUnavailable) {
				t.Errorf("Acquire on the old Backend after the file was %s: %v; want ErrBackendUnavailable", tc.name, err)
			}
		})
	}
}

// TestFileDeletedLeaseEnds: a Client's lease on a file that is deleted
// ends at its next renewal, with ErrLeaseLost.
func TestFileDeletedLeaseEnds(t *testing.T) {
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
	l, err := c.Mutex("job", dlock.TTL(300*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second): // renewals are due every 100 ms
		t.Fatal("the lease on a deleted file was not lost within 30 s")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("Err() = %v; want ErrLeaseLost saying the file was deleted", err)
	}
}

// TestFileTokensAfterRecreate: a file created after another at the same
// path was deleted gives, for every name, tokens above every token of the
// old file, including names the old file never saw.
func TestFileTokensAfterRecreate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	var top uint64
	for round := range 3 {
		b, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b", "new" + string(rune('0'+round))} {
			g, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if g.Token <= top {
				t.Errorf("round %d: %q has token %d; the deleted file gave %d", round, name, g.Token, top)
			}
			top = max(top, g.Token)
			if err := b.Release(ctx, dlock.Hold{Name: name, Owner: "o", Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
		b.Close()
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
}

// TestForeignSchema: Open over a table that is not dlock's (pglock's
// "locks", a foreign waiters or fence table) fails naming it and leaves
// the schema as it was.
func TestForeignSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sqllocktest.ForeignSchema(t, "sqlite", db, func(ctx context.Context, table string) (dlock.Backend, error) {
		return sqlite.Open(ctx, path, sqlite.Table(table))
	})
}
