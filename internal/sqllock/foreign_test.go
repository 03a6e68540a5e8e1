package sqllock_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// TestForeignWaiterRow plants a waiter row that dlock did not write (no
// owner, an expiry that is text) for a free lock: SQLite compares text
// above every number, so before it counted as a live fair waiter for ever
// and the lock was refused with "free, but 1 fair waiter(s) are queued
// first", and never swept. Now TryLock and fair Lock fail with
// ErrForeignData naming the waiters table, nothing is written, and
// Inspect lists the lock marked bad.
func TestForeignWaiterRow(t *testing.T) {
	for _, d := range []sqllock.Dialect{sqllock.SQLite, noReturning} {
		t.Run(d.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			path := filepath.Join(t.TempDir(), "locks.db")
			db := openDB(t, path)
			defer db.Close()
			c, err := dlock.New(factory(path, d, sqllock.Config{})(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := c.Mutex("w").TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO dlock_locks_waiters (name, owner, expires_at) VALUES ('w', '', 'never')`); err != nil {
				t.Fatal(err)
			}
			dump := func() string {
				var n int
				var rows string
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*), group_concat(owner || ':' || expires_at) FROM dlock_locks_waiters`).Scan(&n, &rows); err != nil {
					t.Fatal(err)
				}
				// The released name has no lease row: "" then.
				var row string
				if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(owner || ':' || holds || ':' || token), '') FROM dlock_locks WHERE name = 'w'`).Scan(&row); err != nil {
					t.Fatal(err)
				}
				return rows + " / " + row
			}
			before := dump()
			for _, fair := range []bool{false, true} {
				var err error
				if fair {
					lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err = c.Mutex("w", dlock.Fair()).Lock(lctx)
					cancel()
				} else {
					_, err = c.Mutex("w").TryLock(ctx)
				}
				if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), "dlock_locks_waiters") {
					t.Errorf("fair %v: %v, want ErrForeignData naming the waiters table", fair, err)
				}
			}
			if after := dump(); after != before {
				t.Errorf("the attempts changed the tables: before %s, after %s", before, after)
			}
			infos, err := c.Inspect(ctx, "")
			if err != nil || len(infos) != 1 || infos[0].Name != "w" || !strings.Contains(infos[0].Bad, "dlock_locks_waiters") {
				t.Errorf("Inspect: %+v, %v; want w marked bad", infos, err)
			}
		})
	}
}
