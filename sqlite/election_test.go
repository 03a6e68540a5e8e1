package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqlite"
)

// TestMigrateAddsValue: a holders table made before elections (no value
// column) gets the column when the Backend opens, and keeps its rows; an
// election then publishes its value.
func TestMigrateAddsValue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE dlock_locks_holders (
	name TEXT NOT NULL, owner TEXT NOT NULL, weight INTEGER NOT NULL, holds INTEGER NOT NULL,
	token INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (name, owner)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO dlock_locks_holders VALUES ('old', 'o', 1, 1, 1, 0)`); err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var v string
	if err := db.QueryRow(`SELECT value FROM dlock_locks_holders WHERE name = 'old'`).Scan(&v); err != nil || v != "" {
		t.Fatalf("the old row after Migrate: value %q, %v", v, err)
	}
	e := c.Election("e")
	l, err := e.Campaign(ctx, "here")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	ld, err := e.Leader(ctx)
	if err != nil || ld.Value != "here" || ld.Term != l.Token() {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatalf("a second Migrate: %v", err)
	}
}

// TestMigrateForeignHolders: a holders table that is not dlock's is
// reported, naming it, and nothing is created.
func TestMigrateForeignHolders(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE dlock_locks_holders (id INTEGER PRIMARY KEY, what TEXT)`); err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(ctx, path)
	if err == nil {
		b.Close()
		t.Fatal("Open over a foreign holders table succeeded")
	}
	if !errors.Is(err, dlock.ErrForeignData) {
		t.Errorf("Open over a foreign holders table: %v, want ErrForeignData", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'dlock_locks'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the lease table was created (%d, %v)", n, err)
	}
}
