package mysql_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func sessionFactory(dsn string, opts ...mysql.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := mysql.Open(dsn, append(opts, mysql.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}

func TestSessionConformance(t *testing.T) {
	srv := testserver.MariaDB(t, testserver.WithArgs("--max-connections=300"))
	dlocktest.Run(t, sessionFactory(srv.DSN(), mysql.Table("sess_locks")), dlocktest.Names(sessionNames))
}
