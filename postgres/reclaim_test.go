package postgres_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestBoundedRows: 10,000 names locked and released leave no row, nor do
// 10,000 held by a holder that vanished, once expired and swept by the
// documented number of operations.
func TestBoundedRows(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 names")
	}
	srv := testserver.Postgres(t)
	db := openDB(t, srv.TestDSN())
	sqllocktest.Bounded(t, openFactory(srv.TestDSN()), func(ctx context.Context, prefix string) (int, error) {
		return sqllocktest.Count(ctx, db, sqllock.DefaultTable, prefix)
	}, 10_000)
}

// TestChurn: Backends with pools of their own (standing for processes)
// lock and release one name and many names while another sweeps all the
// time, in lease and in session mode: exclusion holds and tokens increase.
func TestChurn(t *testing.T) {
	srv := testserver.Postgres(t, testserver.WithArgs("-c", "max_connections=300"))
	for _, mode := range []struct {
		name string
		opts []postgres.Option
	}{{"lease", nil}, {"session", []postgres.Option{postgres.Session(), postgres.Table("churn_sess")}}} {
		t.Run(mode.name, func(t *testing.T) {
			r, err := postgres.Open(context.Background(), srv.TestDSN(), mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			sqllocktest.Churn(t, openFactory(srv.TestDSN(), mode.opts...), 3, r.Reclaim)
		})
	}
}

// TestUpgrade: a table of the version before the fence table keeps
// working after migration, and its tokens do not go back.
func TestUpgrade(t *testing.T) {
	srv := testserver.Postgres(t)
	sqllocktest.Upgrade(t, openDB(t, srv.TestDSN()), "postgres", "up_locks", func(noMigrate bool) (dlock.Backend, error) {
		opts := []postgres.Option{postgres.Table("up_locks")}
		if noMigrate {
			opts = append(opts, postgres.NoMigrate())
		}
		return postgres.Open(context.Background(), srv.TestDSN(), opts...)
	})
}
