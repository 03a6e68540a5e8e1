package sqllocktest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sessiontest"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// Target is what the tests that the server backends (postgres, mysql)
// share need of one of them.
type Target struct {
	// Dialect is "postgres" or "mysql".
	Dialect string
	// Start starts a server for the test, with room for 300 connections
	// if many.
	Start func(t *testing.T, many bool) Server
	// Open opens a Backend on dsn as the package's Open does, with the
	// options of m.
	Open func(ctx context.Context, dsn string, m Mode) (dlock.Backend, error)
	// DB opens a pool of the package's driver on dsn, closed when the
	// test ends.
	DB func(t testing.TB, dsn string) *sql.DB
}

// Server is a server that Target.Start started.
type Server struct {
	Addr string // host:port
	DSN  string // of its test database, for Target.Open and Target.DB
	// Process kills and restarts the server's process.
	Process sessiontest.Server
	// TerminateAll ends, from the server, every client connection but
	// its own (pg_terminate_backend, KILL) and returns how many.
	TerminateAll func(t *testing.T) int
}

// Mode is the options a shared test opens a Backend with.
type Mode struct {
	Session   bool   // session mode
	Table     string // the lease table; "" the default
	NoMigrate bool   // only check the tables
}

// modes are lease-table and session mode, by name.
var modes = []struct {
	name string
	m    Mode
}{{"lease", Mode{}}, {"session", Mode{Session: true}}}

func (tg Target) factory(dsn string, m Mode) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := tg.Open(context.Background(), dsn, m)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return b
	}
}

// BoundedRows checks that 10,000 names locked and released leave no row,
// nor do 10,000 held by a holder that vanished, once expired and swept by
// the documented number of operations (see [Bounded]).
func BoundedRows(t *testing.T, tg Target) {
	if testing.Short() {
		t.Skip("10,000 names")
	}
	dsn := tg.Start(t, false).DSN
	db := tg.DB(t, dsn)
	Bounded(t, tg.factory(dsn, Mode{}), func(ctx context.Context, prefix string) (int, error) {
		return Count(ctx, db, sqllock.DefaultTable, prefix)
	}, 10_000)
}

// ChurnModes runs [Churn] in lease and session mode: Backends with pools
// of their own (standing for processes) lock and release one name and
// many names while another sweeps all the time; exclusion holds and
// tokens increase.
func ChurnModes(t *testing.T, tg Target) {
	dsn := tg.Start(t, true).DSN
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m := mode.m
			if m.Session {
				m.Table = "churn_sess"
			}
			r, err := tg.Open(context.Background(), dsn, m)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			Churn(t, tg.factory(dsn, m), 3, r.(interface {
				Reclaim(context.Context) (int, error)
			}).Reclaim)
		})
	}
}

// UpgradeTable runs [Upgrade]: a table of the version before the fence
// table keeps working after migration, and its tokens do not go back.
func UpgradeTable(t *testing.T, tg Target) {
	dsn := tg.Start(t, false).DSN
	Upgrade(t, tg.DB(t, dsn), tg.Dialect, "up_locks", func(noMigrate bool) (dlock.Backend, error) {
		return tg.Open(context.Background(), dsn, Mode{Table: "up_locks", NoMigrate: noMigrate})
	})
}

// SilentLink runs [silenttest.Run] in lease and session mode: Lock,
// Unlock and Extend through a link that swallows the server's replies
// return by their context plus dlock.CancelGrace, and leave nothing that
// holds the lock past its TTL. The modes run at once, on tables of their
// own: the scenarios mostly wait for timeouts.
func SilentLink(t *testing.T, tg Target) {
	srv := tg.Start(t, false)
	target, dsn := srv.Addr, srv.DSN
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			m := mode.m
			m.Table = "silent_" + mode.name
			silenttest.Run(t, silenttest.Env{
				Target: target,
				Open: func(t *testing.T, addr string) dlock.Backend {
					b, err := tg.Open(context.Background(), strings.Replace(dsn, target, addr, 1), m)
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
			})
		})
	}
}
