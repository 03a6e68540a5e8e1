package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// The lease's context keeps context.Context's contract: its Deadline does
// not move with the renewals, so context.WithTimeout on it arms its timer
// (it never fired when the parent reported the moving validity, which was
// always before the timeout).
func TestLeaseContextWithTimeoutFires(t *testing.T) {
	c := newClient(t, mem.New(), dlock.TTL(100*time.Millisecond))
	l, err := c.Mutex("ctx").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	if dl, ok := l.Context().Deadline(); ok {
		t.Errorf("lease.Context().Deadline() = %v, true without MaxHold; want none", dl)
	}
	before := l.Deadline()
	const d = 400 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(l.Context(), d)
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(d + 10*time.Second):
		t.Fatalf("context.WithTimeout(lease.Context(), %v) has not fired after %v", d, time.Since(start))
	}
	if el := time.Since(start); el < d {
		t.Errorf("fired after %v, before %v", el, d)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost meanwhile: %v", err)
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Errorf("ctx.Err() = %v, want context.DeadlineExceeded", err)
	}
	if !l.Deadline().After(before) {
		t.Errorf("the lease was not renewed in %v", time.Since(start))
	}
}

// With MaxHold, the lease's context reports the MaxHold end, the same on
// every call across renewals; a timeout beyond it yields to it.
func TestLeaseContextDeadlineIsMaxHoldEnd(t *testing.T) {
	clk := &fakeClock{}
	c := newClient(t, mem.New(), dlock.WithClock(clk))
	start := clk.Now()
	l, err := c.Mutex("mh", dlock.TTL(100*time.Millisecond), dlock.MaxHold(time.Hour)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	d1, ok := l.Context().Deadline()
	if !ok || d1.Before(start.Add(time.Hour)) || d1.After(clk.Now().Add(time.Hour)) {
		t.Fatalf("lease.Context().Deadline() = %v, %v; want the MaxHold end, an hour after the Lock", d1, ok)
	}
	first := l.Deadline()
	for end := time.Now().Add(10 * time.Second); !l.Deadline().After(first); {
		if time.Now().After(end) {
			t.Fatal("the lease was not renewed within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d2, ok2 := l.Context().Deadline(); !d2.Equal(d1) || !ok2 {
		t.Errorf("lease.Context().Deadline() moved across a renewal: %v, then %v, %v", d1, d2, ok2)
	}
}

// lossy applies the renewals it is given and then loses their answers:
// each returns its context's error once the context ends.
type lossy struct {
	dlock.Backend
	lose chan struct{} // closed: answers are lost
}

func (b *lossy) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	select {
	case <-b.lose:
	default:
		return b.Backend.Renew(ctx, h, ttl)
	}
	b.Backend.Renew(context.WithoutCancel(ctx), h, ttl)
	<-ctx.Done()
	return ctx.Err()
}

// An Extend to a shorter TTL whose answer is lost counts as applied: the
// deadline is lowered before it is sent and not raised again without an
// answer; an Extend to a longer TTL whose answer is lost changes nothing.
func TestLostExtendAnswerCountsAsApplied(t *testing.T) {
	b := &lossy{Backend: mem.New(), lose: make(chan struct{})}
	c := newClient(t, b)
	l, err := c.Mutex("x", dlock.TTL(time.Minute)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	close(b.lose)
	long := l.Deadline()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = l.Extend(ctx, 2*time.Minute)
	cancel()
	if err == nil || !l.Deadline().Equal(long) {
		t.Errorf("Extend to a longer TTL, answer lost: %v, deadline moved by %v; want an error and the deadline unchanged", err, l.Deadline().Sub(long))
	}
	sent := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = l.Extend(ctx, 2*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend whose answer was lost: %v, want context.DeadlineExceeded", err)
	}
	if dl := l.Deadline(); dl.After(sent.Add(2 * time.Second)) {
		t.Errorf("after a lost Extend(2s) from a 1m TTL, Deadline() is %v after it was sent; want at most 2s", dl.Sub(sent))
	}
}

// A silent store is not a busy lock: TryLock whose ctx ends before the
// store answers matches ErrBackendUnavailable as well as ErrNotAcquired.
func TestTryLockAgainstSilentStore(t *testing.T) {
	c := newClient(t, &unanswering{Backend: mem.New()})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("s").TryLock(ctx)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock against a silent store: %v; want ErrBackendUnavailable, ErrNotAcquired and the deadline", err)
	}
}

// unanswering is a store that does not answer: its acquisitions return their
// context's error when it ends, as the backends do.
type unanswering struct{ dlock.Backend }

func (s *unanswering) Acquire(ctx context.Context, _ dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	<-ctx.Done()
	return dlock.Grant{}, nil, ctx.Err()
}
