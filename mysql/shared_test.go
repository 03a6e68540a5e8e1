package mysql_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// target is the backend for the tests it shares with postgres.
var target = sqllocktest.Target{
	Dialect: "mysql",
	Start: func(t *testing.T, many bool) sqllocktest.Server {
		var opts []testserver.Option
		if many {
			opts = append(opts, testserver.WithArgs("--max-connections=300"))
		}
		srv := testserver.MariaDB(t, opts...)
		return sqllocktest.Server{Addr: srv.Addr(), DSN: srv.DSN(), Process: srv,
			TerminateAll: func(t *testing.T) int { return terminateAll(t, srv) }}
	},
	Open: func(ctx context.Context, dsn string, m sqllocktest.Mode) (dlock.Backend, error) {
		var opts []mysql.Option
		if m.Session {
			opts = append(opts, mysql.Session())
		}
		if m.Table != "" {
			opts = append(opts, mysql.Table(m.Table))
		}
		if m.NoMigrate {
			opts = append(opts, mysql.NoMigrate())
		}
		return mysql.Open(ctx, dsn, opts...)
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
