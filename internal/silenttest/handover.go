package silenttest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Waiter locks name with c in the background (for at most d) and sends
// the lease on the channel it returns.
func Waiter(t *testing.T, c *dlock.Client, name string, d time.Duration) <-chan *dlock.Lease {
	t.Helper()
	got := make(chan *dlock.Lease, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// HandOver releases l and returns how long until the waiter (see [Waiter])
// got the lock, and its lease. It fails the test if that takes over max.
func HandOver(t *testing.T, l *dlock.Lease, waiter <-chan *dlock.Lease, max time.Duration) (time.Duration, *dlock.Lease) {
	t.Helper()
	start := time.Now()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case wl := <-waiter:
		return time.Since(start), wl
	case <-time.After(max):
		t.Fatalf("the waiter did not get the lock within %v of the release", max)
		return 0, nil
	}
}

// PollUntil polls cond every 10ms until it holds, or fails the test after
// d.
func PollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
