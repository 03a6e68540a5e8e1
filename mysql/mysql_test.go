package mysql_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(sqllocktest.WorkerEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

func openFactory(dsn string, opts ...mysql.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := mysql.Open(context.Background(), dsn, opts...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return b
	}
}

// variantGrants is the exclusion item's grants per goroutine in the
// suite's runs over other ways to open the Backend: those runs are about
// the wiring, and TestConformance makes the suite's full 200.
const variantGrants = 50

func TestConformance(t *testing.T) {
	srv := testserver.MariaDB(t)
	// One item at a time: with items side by side, weighted items on
	// MariaDB stalled for innodb_lock_wait_timeout (50 s) behind a
	// transaction that held every fence row (seen once under load 14, not
	// reproduced since); serial until that is understood.
	dlocktest.Run(t, openFactory(srv.DSN()), foreign(t, srv.DSN(), "dlock_locks"),
		reclaim(t, srv.DSN(), "dlock_locks"), dlocktest.Parallel(1))
}

// reclaim is the suite's hook to force a sweep of the lease table table
// (through a Backend of its own) and count its rows.
func reclaim(t *testing.T, dsn, table string) dlocktest.Option {
	b, err := mysql.Open(context.Background(), dsn, mysql.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	db := openDB(t, dsn)
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Reclaim(db, table, b.Reclaim)
}

// foreign is the suite's hook to plant foreign data in the lease table
// table, through a *sql.DB of its own.
func foreign(t *testing.T, dsn, table string) dlocktest.Option {
	db := openDB(t, dsn)
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Foreign(db, "mysql", table)
}

// TestConformanceDB runs the suite on Backends over one *sql.DB of the
// caller's, which stays open after.
func TestConformanceDB(t *testing.T) {
	srv := testserver.MariaDB(t)
	db := callerDB(t, srv.DSN())
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		b, err := mysql.New(db, mysql.Table("db_locks"))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return b
		// The per-item leak check would count the watcher goroutine of
		// each of the caller's pooled connections; TestMain checks for
		// leaks once db is closed.
	}, dlocktest.NoLeakCheck(), dlocktest.Grants(variantGrants), dlocktest.Parallel(1))
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// callerDB opens the *sql.DB of a caller of New, with the parameters New
// needs, keeping 24 connections idle for the suite's 16 goroutines; it is
// closed when t ends.
func callerDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn+"?clientFoundRows=true&interpolateParams=true")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(24)
	t.Cleanup(func() { db.Close() })
	return db
}

func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
