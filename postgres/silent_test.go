package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestSilentLink: Lock, Unlock and Extend through a link that swallows the
// server's replies return by their context plus dlock.CancelGrace, in lease
// and session mode, and leave nothing that holds the lock past its TTL.
func TestSilentLink(t *testing.T) {
	srv := testserver.Postgres(t)
	for _, mode := range []struct {
		name string
		opts []postgres.Option
	}{{"lease", nil}, {"session", []postgres.Option{postgres.Session()}}} {
		t.Run(mode.name, func(t *testing.T) {
			silenttest.Run(t, silenttest.Env{
				Target: srv.Addr(),
				Open: func(t *testing.T, addr string) dlock.Backend {
					b, err := postgres.Open(context.Background(), strings.Replace(srv.TestDSN(), srv.Addr(), addr, 1), mode.opts...)
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
			})
		})
	}
}
