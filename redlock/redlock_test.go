package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial, to slog at debug level (see
	// internal/redislog): nothing reaches stderr.
	goleak.VerifyTestMain(m)
}

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
	dlocktest.Run(t, func(t testing.TB) dlock.Backend { return open(t, g, "node_timeout=1s") }, dlocktest.Grants(60),
		foreignHook(t, g), reclaimHook(t, g))
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

// TestFenceAheadOfClock: when the masters' fences are ahead of this
// process's clock (another client's clock runs fast), a grant takes
// another round and its token is still above every fence of the granting
// majority.
func TestFenceAheadOfClock(t *testing.T) {
	g := testserver.RedisN(t, 5)
	b := open(t, g, "")
	ctx := context.Background()
	const ahead = uint64(1) << 52 // far beyond the clock in µs
	for i, n := range g.Nodes() {
		if _, err := n.Do(ctx, "HSET", "dlock:{f}", "f", strconv.FormatUint(ahead+uint64(i), 10)); err != nil {
			t.Fatal(err)
		}
	}
	gr, _, err := b.Acquire(ctx, dlock.Request{Name: "f", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if gr.Token <= ahead+2 {
		t.Fatalf("token %d is not above the fences of a majority (%d..%d)", gr.Token, ahead, ahead+4)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "f", Owner: "o", Token: gr.Token, Handle: gr.Handle}); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
