package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// silent wraps a backend whose answers stop coming: while muted, every
// call is made on the store but its answer is held back, ignoring ctx,
// until the backend is unmuted — a link that forwards requests and
// swallows replies.
type silent struct {
	dlock.Backend
	mu    sync.Mutex
	gate  chan struct{} // closed when unmuted; nil while answers flow
	calls sync.WaitGroup
}

func (s *silent) mute() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *silent) unmute() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

// answer holds the answer back while muted.
func (s *silent) answer() {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (s *silent) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	// The request reaches the store whatever ctx says.
	g, w, err := s.Backend.Acquire(context.WithoutCancel(ctx), req)
	s.answer()
	return g, w, err
}

func (s *silent) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	err := s.Backend.Renew(context.WithoutCancel(ctx), h, ttl)
	s.answer()
	return err
}

func (s *silent) Release(ctx context.Context, h dlock.Hold) error {
	err := s.Backend.Release(context.WithoutCancel(ctx), h)
	s.answer()
	return err
}

// TestCallsReturnByCancelGrace: a backend that gets requests but whose
// answers never come (and that ignores ctx) holds up no Lock, TryLock,
// Unlock or Extend past its context plus dlock.CancelGrace, nor Close past
// dlock.CloseTimeout plus CancelGrace. A grant that arrives after its Lock
// gave up is released, so another owner gets the lock at once.
func TestCallsReturnByCancelGrace(t *testing.T) {
	store := mem.NewStore()
	s := &silent{Backend: store.Backend()}
	c := newClient(t, s, dlock.TTL(time.Minute))
	other := newClient(t, store.Backend(), dlock.TTL(time.Minute))
	ctx := context.Background()
	const short = 300 * time.Millisecond
	within := func(op string, start time.Time) {
		t.Helper()
		// The bound is a guarantee, not a speed; the margin is for a loaded machine.
		if d := time.Since(start); d > short+dlock.CancelGrace+time.Second {
			t.Errorf("%s returned %v after it began; want by its context (%v) + CancelGrace (%v)", op, d, short, dlock.CancelGrace)
		}
	}

	for _, op := range []string{"lock", "trylock"} {
		s.mute()
		cctx, cancel := context.WithTimeout(ctx, short)
		start := time.Now()
		var err error
		if op == "lock" {
			_, err = c.Mutex("silent").Lock(cctx)
		} else {
			_, err = c.Mutex("silent").TryLock(cctx)
		}
		within(op, start)
		cancel()
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrBackendUnavailable) {
			t.Errorf("%s without answers: %v; want ErrNotAcquired, DeadlineExceeded and ErrBackendUnavailable", op, err)
		}
		// The grant the store made is released once its answer comes.
		s.unmute()
		waitUntil(t, 5*time.Second, "the late grant to be released", func() bool {
			l, err := other.Mutex("silent").TryLock(ctx)
			if err != nil {
				return false
			}
			l.Unlock(ctx)
			return true
		})
	}

	l, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.mute()
	cctx, cancel := context.WithTimeout(ctx, short)
	start := time.Now()
	err = l.Extend(cctx, 2*time.Minute)
	within("extend", start)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend without answers: %v; want ErrBackendUnavailable and DeadlineExceeded", err)
	}
	cancel()
	cctx, cancel = context.WithTimeout(ctx, short)
	start = time.Now()
	err = l.Unlock(cctx)
	within("unlock", start)
	cancel()
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Unlock without answers: %v; want ErrBackendUnavailable and DeadlineExceeded", err)
	}

	// Close with a lease to release and no answers.
	s.unmute()
	if _, err := c.Mutex("at-close").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s.mute()
	start = time.Now()
	err = c.Close()
	if d := time.Since(start); d > dlock.CloseTimeout+dlock.CancelGrace+time.Second {
		t.Errorf("Close returned after %v; want by CloseTimeout + CancelGrace", d)
	}
	if !errors.Is(err, dlock.ErrBackendUnavailable) {
		t.Errorf("Close without answers: %v; want ErrBackendUnavailable", err)
	}
	s.unmute() // the calls left running end before goleak looks
}
