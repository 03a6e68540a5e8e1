package zookeeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect returns a backend on servers, closed at the end of the test.
func connect(t testing.TB, servers []string, opts ...zookeeper.Option) *zookeeper.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := zookeeper.Open(ctx, strings.Join(servers, ","), opts...)
	if err != nil {
		t.Fatalf("Open(%v): %v", servers, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// client returns a dlock Client on b, closed at the end of the test.
func client(t testing.TB, b dlock.Backend, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a ZooKeeper server")
	}
	// The suite holds some locks with a TTL of a minute, which must fit
	// in the session timeout.
	srv := testserver.ZooKeeper(t, testserver.WithZooConfig("maxSessionTimeout", "60000"))
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := zookeeper.Open(ctx, srv.Addr(), zookeeper.Root("/conformance"), zookeeper.SessionTimeout(time.Minute))
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		return b
	}, foreignHook(connect(t, []string{srv.Addr()}, zookeeper.Root("/conformance"))))
}

// zkServer starts a standalone ZooKeeper server for the test; it skips
// under -short.
func zkServer(t *testing.T, opts ...testserver.Option) *testserver.ZooKeeperServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a ZooKeeper server")
	}
	return testserver.ZooKeeper(t, opts...)
}
