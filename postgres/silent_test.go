package postgres_test

import (
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestSilentShorterExtend: an Extend to a shorter TTL whose reply a proxy
// swallowed counts as applied, in lease-table and in session mode.
func TestSilentShorterExtend(t *testing.T) {
	srv := testserver.Postgres(t)
	for _, session := range []bool{false, true} {
		name := map[bool]string{false: "Lease", true: "Session"}[session]
		t.Run(name, func(t *testing.T) {
			silenttest.ShorterExtend(t, silenttest.Env{
				Target: srv.Addr(),
				Open: func(t *testing.T, addr string) dlock.Backend {
					dsn := strings.Replace(srv.TestDSN(), srv.Addr(), addr, 1)
					if session {
						return sessionFactory(dsn, postgres.Table("sess_locks"))(t)
					}
					return openFactory(dsn)(t)
				},
			})
		})
	}
}
