package sqlite_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/sqlite"
)

// TestBoundedRows: 10,000 names locked and released leave no row, nor do
// 10,000 held by a holder that vanished, once expired and swept by the
// documented number of operations.
func TestBoundedRows(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 names")
	}
	path := filepath.Join(t.TempDir(), "locks.db")
	db := countDB(t, path)
	sqllocktest.Bounded(t, openFactory(path), func(ctx context.Context, prefix string) (int, error) {
		return sqllocktest.Count(ctx, db, sqllock.DefaultTable, prefix)
	}, 10_000)
}

// TestChurn: Backends with in-process state of their own (standing for
// processes) lock and release one name and many names while another
// sweeps all the time: exclusion holds and tokens increase.
func TestChurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	r, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sqllocktest.Churn(t, openFactory(path, sqlite.PrivateLocal()), 3, r.Reclaim)
}

func countDB(t *testing.T, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestUpgrade: a table of the version before the fence table keeps
// working after migration, and its tokens do not go back.
func TestUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	sqllocktest.Upgrade(t, countDB(t, path), "sqlite", sqllock.DefaultTable, func(noMigrate bool) (dlock.Backend, error) {
		if noMigrate { // SQLite has no NoMigrate option: check as it would
			if err := sqllock.Check(context.Background(), countDB(t, path), sqllock.SQLite, sqllock.DefaultTable); err != nil {
				return nil, err
			}
		}
		return sqlite.Open(context.Background(), path)
	})
}
