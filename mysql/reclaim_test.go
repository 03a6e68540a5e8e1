package mysql_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// TestBoundedRows: 10,000 names locked and released leave no row, nor do
// 10,000 held by a holder that vanished, once expired and swept by the
// documented number of operations.
func TestBoundedRows(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 names")
	}
	srv := testserver.MariaDB(t)
	db := openDB(t, srv.DSN())
	sqllocktest.Bounded(t, openFactory(srv.DSN()), func(ctx context.Context, prefix string) (int, error) {
		return sqllocktest.Count(ctx, db, sqllock.DefaultTable, prefix)
	}, 10_000)
}

// TestChurn: Backends with pools of their own (standing for processes)
// lock and release one name and many names while another sweeps all the
// time, in lease and in session mode: exclusion holds and tokens increase.
func TestChurn(t *testing.T) {
	srv := testserver.MariaDB(t, testserver.WithArgs("--max-connections=300"))
	for _, mode := range []struct {
		name string
		opts []mysql.Option
	}{{"lease", nil}, {"session", []mysql.Option{mysql.Session(), mysql.Table("churn_sess")}}} {
		t.Run(mode.name, func(t *testing.T) {
			r, err := mysql.Open(context.Background(), srv.DSN(), mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			sqllocktest.Churn(t, openFactory(srv.DSN(), mode.opts...), 3, r.Reclaim)
		})
	}
}

// TestUpgrade: a table of the version before the fence table keeps
// working after migration, and its tokens do not go back.
func TestUpgrade(t *testing.T) {
	srv := testserver.MariaDB(t)
	sqllocktest.Upgrade(t, openDB(t, srv.DSN()), "mysql", "up_locks", func(noMigrate bool) (dlock.Backend, error) {
		opts := []mysql.Option{mysql.Table("up_locks")}
		if noMigrate {
			opts = append(opts, mysql.NoMigrate())
		}
		return mysql.Open(context.Background(), srv.DSN(), opts...)
	})
}
