package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noReturning is SQLite spoken as if it had no RETURNING, as MySQL must be:
// it runs the engine's transactional paths.
var noReturning = func() sqllock.Dialect {
	d := sqllock.SQLite
	d.Name = "sqlite-noreturning"
	d.Returning = false
	return d
}()

func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(8)
	return db
}

// factory makes each backend on its own *sql.DB with its own Local, as
// separate processes would have: only the data_version feed wakes them.
func factory(path string, d sqllock.Dialect, cfg sqllock.Config) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		db := openDB(t, path)
		c := cfg
		c.Feed = sqllock.NewPollFeed(db.Conn, "PRAGMA data_version", 5*time.Millisecond, 25*time.Millisecond)
		c.OnClose = db.Close
		e, err := sqllock.New(context.Background(), db, d, c)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return e
	}
}

func TestConformance(t *testing.T) {
	for _, d := range []sqllock.Dialect{sqllock.SQLite, noReturning} {
		t.Run(d.Name, func(t *testing.T) {
			var opts []dlocktest.Option
			if !d.Returning {
				// Each attempt is a transaction of unprepared statements
				// here: slow under the race detector, and the logic is
				// the same at a quarter of the grants.
				opts = append(opts, dlocktest.Grants(50))
			}
			path := filepath.Join(t.TempDir(), "locks.db")
			dlocktest.Run(t, factory(path, d, sqllock.Config{Table: "t_" + time.Now().Format("150405")}), opts...)
		})
	}
}

// TestNoFeed runs the suite with neither a feed nor shared in-process
// state: waiters fall back to looking at the state at a backing-off
// interval.
func TestNoFeed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	path := filepath.Join(t.TempDir(), "locks.db")
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		db := openDB(t, path)
		e, err := sqllock.New(context.Background(), db, sqllock.SQLite, sqllock.Config{OnClose: db.Close})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return e
	}, dlocktest.Grants(50))
}

func TestCheckTable(t *testing.T) {
	for _, ok := range []string{"dlock_locks", "_x", "A1", "a23456789012345678901234567890123456789012345678"} {
		if err := sqllock.CheckTable(ok); err != nil {
			t.Errorf("CheckTable(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-b", "a b", "a;drop", `a"`, "é", "a.b", "a234567890123456789012345678901234567890123456789"} {
		if err := sqllock.CheckTable(bad); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("CheckTable(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

func TestMigrateForeignTable(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "x.db"))
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE mine (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	err := sqllock.Migrate(context.Background(), db, sqllock.SQLite, "mine")
	if err == nil {
		t.Fatal("Migrate over a foreign table succeeded")
	}
	t.Log(err)
	// Twice is fine.
	for range 2 {
		if err := sqllock.Migrate(context.Background(), db, sqllock.SQLite, ""); err != nil {
			t.Fatal(err)
		}
	}
}
