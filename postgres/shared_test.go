package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// target is the backend for the tests it shares with mysql.
var target = sqllocktest.Target{
	Dialect: "postgres",
	Start: func(t *testing.T, many bool) sqllocktest.Server {
		var opts []testserver.Option
		if many {
			opts = append(opts, testserver.WithArgs("-c", "max_connections=300"))
		}
		srv := testserver.Postgres(t, opts...)
		return sqllocktest.Server{Addr: srv.Addr(), DSN: srv.TestDSN(), Process: srv,
			TerminateAll: func(t *testing.T) int { return terminateAll(t, srv) }}
	},
	Open: func(ctx context.Context, dsn string, m sqllocktest.Mode) (dlock.Backend, error) {
		var opts []postgres.Option
		if m.Session {
			opts = append(opts, postgres.Session())
		}
		if m.Table != "" {
			opts = append(opts, postgres.Table(m.Table))
		}
		if m.NoMigrate {
			opts = append(opts, postgres.NoMigrate())
		}
		return postgres.Open(ctx, dsn, opts...)
	},
	DB: openDB,
}

func TestBoundedRows(t *testing.T) { sqllocktest.BoundedRows(t, target) }
func TestChurn(t *testing.T)       { sqllocktest.ChurnModes(t, target) }
func TestUpgrade(t *testing.T)     { sqllocktest.UpgradeTable(t, target) }
func TestSilentLink(t *testing.T)  { sqllocktest.SilentLink(t, target) }

// TestHerd: many waiters on one name in one process take a bounded number
// of connections, in both modes, fair or not.
func TestHerd(t *testing.T) { sqllocktest.Herd(t, target) }

// TestForeignSchema: Open over a table that is not dlock's (pglock's
// "locks", a foreign waiters or fence table) fails naming it and leaves
// the schema as it was: no table, trigger or function added.
func TestForeignSchema(t *testing.T) {
	dsn := target.Start(t, false).DSN
	sqllocktest.ForeignSchema(t, "postgres", target.DB(t, dsn), func(ctx context.Context, table string) (dlock.Backend, error) {
		return target.Open(ctx, dsn, sqllocktest.Mode{Table: table})
	})
}

// appGrants are the grants the package doc lists for an application user.
var appGrants = func() []sqllocktest.Grant {
	var gs []sqllocktest.Grant
	for _, t := range []string{"dlock_locks", "dlock_locks_waiters", "dlock_locks_listeners"} {
		for _, p := range []string{"SELECT", "INSERT", "UPDATE", "DELETE"} {
			gs = append(gs, sqllocktest.Grant{Privilege: p, Table: t})
		}
	}
	return append(gs, sqllocktest.Grant{Privilege: "SELECT", Table: "dlock_locks_fence"},
		sqllocktest.Grant{Privilege: "UPDATE", Table: "dlock_locks_fence"},
		sqllocktest.Grant{Privilege: "SELECT", Table: "dlock_locks_watchers"},
		sqllocktest.Grant{Privilege: "INSERT", Table: "dlock_locks_watchers"},
		sqllocktest.Grant{Privilege: "DELETE", Table: "dlock_locks_watchers"})
}()

// TestPrivileges: a role with only the documented grants locks, waits and
// releases; one without any of them is told at Open, naming the table.
func TestPrivileges(t *testing.T) {
	dsn := target.Start(t, false).DSN
	db := target.DB(t, dsn)
	ctx := context.Background()
	b, err := postgres.Open(ctx, dsn) // the administrator migrates
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := db.ExecContext(ctx, `CREATE ROLE dlock_app LOGIN`); err != nil {
		t.Fatal(err)
	}
	app := strings.Replace(dsn, "postgres@", "dlock_app@", 1)
	sqllocktest.Privileges(t, appGrants,
		func(ctx context.Context, g sqllocktest.Grant) error {
			_, err := db.ExecContext(ctx, "GRANT "+g.Privilege+" ON "+g.Table+" TO dlock_app")
			return err
		},
		func(ctx context.Context, g sqllocktest.Grant) error {
			_, err := db.ExecContext(ctx, "REVOKE "+g.Privilege+" ON "+g.Table+" FROM dlock_app")
			return err
		},
		func(ctx context.Context, m sqllocktest.Mode) (dlock.Backend, error) { return target.Open(ctx, app, m) })
}
