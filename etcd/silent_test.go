package etcd_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestSilentLink: Lock, Unlock and Extend through a link that swallows the
// server's replies return by their context plus dlock.CancelGrace and
// leave nothing that holds the lock past its TTL.
func TestSilentLink(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	silenttest.Run(t, silenttest.Env{
		Target: srv.Addr(),
		Open: func(t *testing.T, addr string) dlock.Backend {
			return open(t, []string{"http://" + addr}, "silent/")
		},
	})
}
