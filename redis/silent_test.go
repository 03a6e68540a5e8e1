package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redis"
)

// TestSilentLink: Lock, Unlock and Extend through a link that swallows the
// server's replies return by their context plus dlock.CancelGrace and
// leave nothing that holds the lock past its TTL.
func TestSilentLink(t *testing.T) {
	srv := testserver.Redis(t)
	silenttest.Run(t, silenttest.Env{
		Target: srv.Addr(),
		Open: func(t *testing.T, addr string) dlock.Backend {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := redis.Open(ctx, addr, redis.DB(0))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	})
}
