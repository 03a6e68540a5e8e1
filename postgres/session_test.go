package postgres_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func TestSessionConformance(t *testing.T) {
	srv := testserver.Postgres(t, testserver.WithArgs("-c", "max_connections=300"))
	dlocktest.Run(t, sessionFactory(srv.TestDSN(), postgres.Table("sess_locks")), dlocktest.Names(sessionNames))
}

func sessionFactory(dsn string, opts ...postgres.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := postgres.Open(dsn, append(opts, postgres.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}
