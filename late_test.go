package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/mem"
)

// stall answers acquisitions (and, while renewStall is set, renewals)
// only after a delay, as a store does during a failover or an election.
type stall struct {
	dlock.Backend
	acquireStall, renewStall atomic.Int64 // nanoseconds
	releases                 atomic.Int32
	releaseFails             atomic.Int32 // so many Releases fail, unreachable, before one is sent
	released                 atomic.Int32 // Releases the store carried out
	during                   func()       // runs inside the acquire stall
}

// Acquire stalls after the store granted: the answer is late.
func (s *stall) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, w, err := s.Backend.Acquire(ctx, req)
	if d := s.acquireStall.Load(); err == nil && d > 0 {
		time.Sleep(time.Duration(d))
		if s.during != nil {
			s.during()
		}
	}
	return g, w, err
}

func (s *stall) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	err := s.Backend.Renew(ctx, h, ttl)
	time.Sleep(time.Duration(s.renewStall.Load()))
	return err
}

func (s *stall) Release(ctx context.Context, h dlock.Hold) error {
	s.releases.Add(1)
	if s.releaseFails.Add(-1) >= 0 {
		return fmt.Errorf("%w: store unreachable (test)", dlock.ErrBackendUnavailable)
	}
	err := s.Backend.Release(ctx, h)
	if err == nil {
		s.released.Add(1)
	}
	return err
}

// A grant whose answer arrives after the validity the client can promise
// (TTL × (1 − drift) from the send) is renewed before Lock returns it:
// Lock never hands out a lease that is already over.
func TestLateGrantIsRenewedBeforeItIsReturned(t *testing.T) {
	ttl := 200 * time.Millisecond
	s := &stall{Backend: mem.New()}
	c := newClient(t, s, dlock.TTL(ttl), dlock.Drift(0.4))
	ctx := context.Background()
	s.acquireStall.Store(int64(ttl * 3 / 4)) // past 0.6 × TTL, still held in the store
	l, err := c.Mutex("late").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if err := l.Err(); err != nil {
		t.Fatalf("Lock returned a lease that is over: %v", err)
	}
	if left := time.Until(l.Deadline()); left <= 0 || left > ttl {
		t.Fatalf("deadline %v from now, want within (0, %v]", left, ttl)
	}
}

// A store that answers every renewal after the TTL too makes Lock fail
// with ErrBackendUnavailable, and the hold is released.
func TestLateGrantThatCannotBeRenewedIsReleased(t *testing.T) {
	ttl := 200 * time.Millisecond
	s := &stall{Backend: mem.New()}
	c := newClient(t, s, dlock.TTL(ttl), dlock.Drift(0.4))
	s.acquireStall.Store(int64(ttl * 3 / 4))
	s.renewStall.Store(int64(ttl * 3 / 4))
	_, err := c.Mutex("late").Lock(context.Background())
	if !errors.Is(err, dlock.ErrBackendUnavailable) {
		t.Fatalf("Lock = %v, want ErrBackendUnavailable", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.releases.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.releases.Load() == 0 {
		t.Fatal("the late hold was not released")
	}
}

// The release of a late grant that could not be renewed rides out a store
// that cannot be reached for a moment, as every background release does,
// instead of leaving the hold to its TTL after one failed try.
func TestLateGrantReleaseRetriesWhileUnreachable(t *testing.T) {
	// Answers come after the validity (0.55 × TTL) but leave the store's
	// hold 0.4 × TTL for the release's tries.
	ttl := time.Second
	s := &stall{Backend: mem.New()}
	c := newClient(t, s, dlock.TTL(ttl), dlock.Drift(0.45))
	s.acquireStall.Store(int64(ttl * 6 / 10))
	s.renewStall.Store(int64(ttl * 6 / 10))
	s.releaseFails.Store(2)
	_, err := c.Mutex("late").Lock(context.Background())
	if !errors.Is(err, dlock.ErrBackendUnavailable) {
		t.Fatalf("Lock = %v, want ErrBackendUnavailable", err)
	}
	dlocktest.WaitFor(t, 5*time.Second, func() error {
		if s.released.Load() == 0 {
			return fmt.Errorf("the late hold was not released on the store (%d Release calls)", s.releases.Load())
		}
		return nil
	})
	if n := s.releases.Load(); n != 3 {
		t.Fatalf("%d Release calls, want 3 (2 unreachable, then 1 carried out)", n)
	}
}

// A late grant that another holder took over during the stall is not
// returned: TryLock says ErrNotAcquired, Lock waits and is granted
// later with a greater token.
func TestLateGrantLostMeanwhile(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := mem.New()
	s := &stall{Backend: b}
	c := newClient(t, s, dlock.TTL(ttl))
	other := newClient(t, b, dlock.TTL(ttl))
	ctx := context.Background()
	var taken atomic.Pointer[dlock.Lease]
	s.during = func() {
		if taken.Load() == nil {
			if l, err := other.Mutex("late").TryLock(ctx); err == nil {
				taken.Store(l)
			}
		}
	}
	s.acquireStall.Store(int64(ttl + 50*time.Millisecond))
	_, err := c.Mutex("late").TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock = %v, want ErrNotAcquired", err)
	}
	held := taken.Load()
	if held == nil {
		t.Fatal("the other client was not granted the lock during the stall")
	}
	s.acquireStall.Store(0)
	go func() { time.Sleep(50 * time.Millisecond); held.Unlock(ctx) }()
	l, err := c.Mutex("late").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if l.Token() <= held.Token() {
		t.Fatalf("token %d after the other holder's %d", l.Token(), held.Token())
	}
}

// A store whose grants always arrive after the TTL (and are lost by then)
// ends Lock with ErrBackendUnavailable instead of waiting for ever.
func TestLateGrantsInARow(t *testing.T) {
	ttl := 100 * time.Millisecond
	s := &stall{Backend: mem.New()}
	c := newClient(t, s, dlock.TTL(ttl))
	s.acquireStall.Store(int64(ttl + 30*time.Millisecond))
	_, err := c.Mutex("late").Lock(context.Background())
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("Lock = %v, want ErrBackendUnavailable saying the TTL is too short", err)
	}
}
