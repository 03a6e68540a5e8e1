package zookeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/zookeeper"
)

// TestSilentLink: Lock, Unlock and Extend through a link that swallows the
// server's replies return by their context plus dlock.CancelGrace and
// leave nothing that holds the lock past its TTL (the session's timeout).
func TestSilentLink(t *testing.T) {
	srv := zkServer(t)
	silenttest.Run(t, silenttest.Env{
		Target: srv.Addr(),
		Open: func(t *testing.T, addr string) dlock.Backend {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := zookeeper.Open(ctx, addr, zookeeper.Root("/silent"))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	})
}
