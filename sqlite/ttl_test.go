package sqlite_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// The store keeps a huge TTL, even one the Client would refuse, as at
// least the time asked: the millisecond conversion saturates instead of
// wrapping. Before, TTL math.MaxInt64 reached the table as 1 ms and a
// second owner was granted 50 ms later (tokens 1 and 2).
func TestHugeTTLDoesNotWrap(t *testing.T) {
	open := openFactory(filepath.Join(t.TempDir(), "locks.db"))
	a, b := open(t), open(t)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	for i, ttl := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Millisecond + 2} {
		name := []string{"huge", "huge2"}[i]
		g, _, err := a.Acquire(ctx, dlock.Request{Name: name, Owner: "a", TTL: ttl})
		if err != nil {
			t.Fatalf("Acquire with TTL %d: %v", int64(ttl), err)
		}
		time.Sleep(50 * time.Millisecond)
		if g2, _, err := b.Acquire(ctx, dlock.Request{Name: name, Owner: "b", TTL: time.Second}); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TTL %d: a second owner's Acquire 50ms later = token %d, %v; want ErrNotAcquired (first token %d)", int64(ttl), g2.Token, err, g.Token)
		}
		if err := a.Release(ctx, dlock.Hold{Name: name, Owner: "a", Token: g.Token, Handle: g.Handle}); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
}
