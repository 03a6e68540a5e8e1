package redlock_test

import (
	"context"
	"errors"
	"net/url"
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
	b, err := openURL(context.Background(), masterURL(g, query), opts...)
	if err != nil {
		t.Fatalf("open %s: %v", masterURL(g, query), err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// openURL opens the backend of a redlock URL as dlock.Open does, with opts
// after the URL's.
func openURL(ctx context.Context, rawURL string, opts ...redlock.Option) (*redlock.Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	addr, uopts, err := redlock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	return redlock.Open(ctx, addr, append(uopts, opts...)...)
}

func TestConformance(t *testing.T) {
	g := testserver.RedisN(t, 5)
	dlocktest.Run(t, func(t testing.TB) dlock.Backend { return open(t, g, "node_timeout=1s") }, dlocktest.Grants(60),
		foreignHook(t, g), reclaimHook(t, g))
}

func TestURL(t *testing.T) {
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
	for _, bad := range []string{"redlock://", "redlock://h:1?nope=1", "redlock://h:x", "redlock://h:1?node_timeout=-1s", "redlock://h:1/path",
		"redlock://h:1?db=1&db=2", "redlock://h:1?db=-1", "redlock://h:1?connect_timeout=x", "redlock://h:1,,h:2"} {
		if _, err := dlock.Open(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "invalid option") {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestOpenOptions: Open takes the masters as a comma list and the URL's
// settings as options; New, on the caller's clients, rejects the options
// that make clients.
func TestOpenOptions(t *testing.T) {
	g := testserver.RedisN(t, 3)
	ctx := context.Background()
	b, err := redlock.Open(ctx, strings.Join(g.Addrs(), ","), redlock.DB(2), redlock.KeyPrefix("o"), redlock.ConnectTimeout(time.Minute))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	g0, _, err := b.Acquire(ctx, dlock.Request{Name: "a", Owner: "me", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer b.Release(ctx, dlock.Hold{Name: "a", Owner: "me", Token: g0.Token, Handle: g0.Handle})
	for _, n := range g.Nodes() {
		// The hold and the fence are in database 2. Acquire returns once
		// a quorum granted: the last master may get its write a moment
		// later.
		var v any
		var err error
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			v, err = n.Do(ctx, "INFO", "keyspace")
			if err == nil && strings.Contains(v.(string), "db2:keys=") || time.Now().After(end) {
				break
			}
		}
		if err != nil || !strings.Contains(v.(string), "db2:keys=") {
			t.Errorf("master %s: INFO keyspace = %q, %v; want keys in db2", n.Addr(), v, err)
		}
	}
	if _, err := redlock.New(nil, redlock.DB(1)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with DB: %v, want ErrInvalidOption", err)
	}
	if _, err := redlock.Open(ctx, "h:1,,h:2"); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Open of an empty address: %v, want ErrInvalidOption", err)
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

// TestElectionRefused: Redlock holds no elections; Campaign says why
// (a majority read of the value, a Proclaim that may reach a minority)
// and writes nothing, and Watch needs a holder listing Redlock lacks.
func TestElectionRefused(t *testing.T) {
	g := testserver.RedisN(t, 3)
	b := open(t, g, "")
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, err = c.Election("el").Campaign(ctx, "v")
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Proclaim") {
		t.Errorf("Campaign: %v, want ErrUnsupported saying why", err)
	}
	for _, n := range g.Nodes() {
		if keys, err := n.Do(ctx, "keys", "*el*"); err != nil || len(keys.([]any)) != 0 {
			t.Errorf("master %s has keys %v (%v) after a refused Campaign", n.Addr(), keys, err)
		}
	}
	if _, err := c.Watch(ctx, "el"); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Watch: %v, want ErrInvalidOption (no holder listing)", err)
	}
}
