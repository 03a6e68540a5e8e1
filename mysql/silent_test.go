package mysql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// TestSilentLink: Lock, Unlock and Extend through a link that swallows the
// server's replies return by their context plus dlock.CancelGrace, in lease
// and session mode, and leave nothing that holds the lock past its TTL.
func TestSilentLink(t *testing.T) {
	srv := testserver.MariaDB(t)
	for _, mode := range []struct {
		name string
		opts []mysql.Option
	}{{"lease", nil}, {"session", []mysql.Option{mysql.Session()}}} {
		t.Run(mode.name, func(t *testing.T) {
			silenttest.Run(t, silenttest.Env{
				Target: srv.Addr(),
				Open: func(t *testing.T, addr string) dlock.Backend {
					b, err := mysql.Open(context.Background(), strings.Replace(srv.DSN(), srv.Addr(), addr, 1), mode.opts...)
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
			})
		})
	}
}
