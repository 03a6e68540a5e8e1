package redis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial, to slog at debug level (see
	// internal/redislog): nothing reaches stderr.
	goleak.VerifyTestMain(m)
}

// newClient returns a go-redis client on addr, closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// newBackend returns a backend on a client of its own (as a separate
// process would have), both closed when the test ends.
func newBackend(t testing.TB, addr string, opts ...dredis.Option) *dredis.Backend {
	t.Helper()
	b, err := dredis.New(newClient(t, addr), opts...)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	srv := testserver.Redis(t)
	dlocktest.Run(t, func(t testing.TB) dlock.Backend { return newBackend(t, srv.Addr()) },
		foreignHook(func() goredis.UniversalClient { return goredis.NewClient(&goredis.Options{Addr: srv.Addr()}) }, "dlock"),
		reclaimHook(func() goredis.UniversalClient { return goredis.NewClient(&goredis.Options{Addr: srv.Addr()}) }, "dlock"))
}

func TestClusterConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Redis Cluster")
	}
	cl := testserver.RedisCluster(t, 3)
	addr := strings.Join(cl.Addrs(), ",")
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		b, err := dredis.Open(context.Background(), addr, dredis.Cluster())
		if err != nil {
			t.Fatalf("Open(%s, Cluster()): %v", addr, err)
		}
		return b
	}, foreignHook(func() goredis.UniversalClient {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	}, "dlock"), reclaimHook(func() goredis.UniversalClient {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	}, "dlock"))
}
