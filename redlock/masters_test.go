package redlock_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// TestDuplicateMaster: a master listed twice (exactly, or with the
// default port written out or left out, or as localhost and 127.0.0.1) is
// ErrInvalidOption naming it, from Open and from New. Before, it counted
// twice toward the quorum: Lock on a free lock waited forever, and TryLock
// said "0 of 3 masters granted".
func TestDuplicateMaster(t *testing.T) {
	g := testserver.RedisN(t, 2)
	a, b := g.Node(0).Addr(), g.Node(1).Addr()
	port := a[strings.LastIndex(a, ":")+1:]
	for _, tc := range []struct{ url, dup string }{
		{"redlock://" + a + "," + a + "," + b, a},
		{"redlock://" + a + "," + b + ",localhost:" + port, a},
		{"redlock://h1,h1:6379," + b, "h1:6379"},
		{"redlock://H1:6379,h1," + b, "h1:6379"},
	} {
		c, err := dlock.Open(t.Context(), tc.url)
		if err == nil {
			c.Close()
			t.Errorf("Open %s: no error", tc.url)
			continue
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.dup) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("Open %s: %v; want ErrInvalidOption saying %s is listed twice", tc.url, err, tc.dup)
		}
	}
	var clients []*goredis.Client
	for _, addr := range []string{a, b, a} {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		clients = append(clients, c)
	}
	if be, err := redlock.New(clients); err == nil {
		be.Close()
		t.Errorf("New with %s twice: no error", a)
	} else if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), a) {
		t.Errorf("New with %s twice: %v; want ErrInvalidOption naming it", a, err)
	}
	// Distinct masters are fine.
	be, err := redlock.New(clients[:2])
	if err != nil {
		t.Fatalf("New with two distinct masters: %v", err)
	}
	be.Close()
}

// TestFewMastersWarning: fewer than three masters is allowed, with a
// warning on the backend's Logger; three are not warned about, and
// without a Logger nothing is written (not even to slog.Default()).
func TestFewMastersWarning(t *testing.T) {
	g := testserver.RedisN(t, 3)
	var deflt bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&deflt, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	for _, tc := range []struct {
		addrs []string
		warn  bool
	}{{g.Addrs()[:1], true}, {g.Addrs()[:2], true}, {g.Addrs(), false}} {
		var buf bytes.Buffer
		b, err := redlock.Open(t.Context(), strings.Join(tc.addrs, ","), redlock.Logger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err != nil {
			t.Fatalf("Open with %d masters: %v", len(tc.addrs), err)
		}
		c, err := dlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Mutex("few").TryLock(t.Context())
		if err != nil {
			t.Errorf("TryLock with %d masters: %v", len(tc.addrs), err)
		} else {
			l.Unlock(t.Context())
		}
		c.Close()
		got := strings.Contains(buf.String(), "fewer than three masters")
		if got != tc.warn {
			t.Errorf("%d masters: warning %v, want %v (log: %q)", len(tc.addrs), got, tc.warn, buf.String())
		}
		// Without a Logger: silent.
		c, err = dlock.Open(t.Context(), "redlock://"+strings.Join(tc.addrs, ","))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if deflt.Len() > 0 {
		t.Errorf("the library wrote to slog.Default(): %q", deflt.String())
	}
}
