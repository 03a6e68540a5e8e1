package redlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests cause many.
	goredis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// masterURL is the redlock URL of the group's masters.
func masterURL(g *testserver.RedisGroup, query string) string {
	u := "redlock://" + strings.Join(g.Addrs(), ",")
	if query != "" {
		u += "?" + query
	}
	return u
}

// open returns a backend on the group, closed when the test ends.
func open(t testing.TB, g *testserver.RedisGroup, query string, opts ...redlock.Option) *redlock.Backend {
	t.Helper()
	b, err := redlock.OpenURL(context.Background(), masterURL(g, query), opts...)
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	g := testserver.RedisN(t, 5)
	dlocktest.Run(t, func(t testing.TB) dlock.Backend { return open(t, g, "node_timeout=1s") }, dlocktest.Grants(60))
}

func TestOpenURL(t *testing.T) {
	g := testserver.RedisN(t, 3)
	c, err := dlock.Open(context.Background(), masterURL(g, "key_prefix=x&node_timeout=50ms"))
	if err != nil {
		t.Fatalf("dlock.Open: %v", err)
	}
	defer c.Close()
	l, err := c.Mutex("a").TryLock(context.Background())
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for _, bad := range []string{"redlock://", "redlock://h:1?nope=1", "redlock://h:x", "redlock://h:1?node_timeout=-1s", "redlock://h:1/path"} {
		if _, err := dlock.Open(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "invalid option") {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}
