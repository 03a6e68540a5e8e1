package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// poller is a broken backend: its waiters ignore every notification and
// look again every 400 ms. It passed the whole suite before
// WokenNotPolling.
type poller struct{ dlock.Backend }

func (p poller) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, w, err := p.Backend.Acquire(ctx, req)
	if w != nil {
		w = sleepyWaiter{w}
	}
	return g, w, err
}

type sleepyWaiter struct{ dlock.Waiter }

func (w sleepyWaiter) Wait(ctx context.Context) error {
	select {
	case <-time.After(400 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newTestClient(t *testing.T, b dlock.Backend) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestWokenNotPollingCatchesAPoller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := mem.NewStore()
	holder := newTestClient(t, s.Backend())
	err := checkWoken(ctx, holder, newTestClient(t, newObserved(poller{s.Backend()})), "polled")
	if err == nil || !strings.Contains(err.Error(), "it polls") {
		t.Fatalf("checkWoken on a waiter that polls every 400ms: %v, want an error saying it polls", err)
	}
	t.Log(err)
	// The same check passes on mem, whose waiters are woken.
	if err := checkWoken(ctx, holder, newTestClient(t, newObserved(s.Backend())), "woken"); err != nil {
		t.Fatalf("checkWoken on mem: %v", err)
	}
}

// plainRefusal is a backend that refuses with a plain error matching
// ErrNotAcquired, never a *HeldError, which the contract allows. The
// FairFIFO, CancelledWaiter and CloseWithLocksHeld items waited for OnWait,
// which fires only on a *HeldError, and hung until the watchdog.
type plainRefusal struct{ dlock.Backend }

func strip(err error) error {
	var held *dlock.HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("%w: busy", dlock.ErrNotAcquired)
	}
	return err
}

func (p plainRefusal) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, w, err := p.Backend.Acquire(ctx, req)
	if w != nil {
		w = plainWaiter{w}
	}
	return g, w, strip(err)
}

type plainWaiter struct{ dlock.Waiter }

func (w plainWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	g, err := w.Waiter.Acquire(ctx)
	return g, strip(err)
}

func TestItemsDoNotNeedHeldError(t *testing.T) {
	s := mem.NewStore()
	f := func(testing.TB) dlock.Backend { return plainRefusal{s.Backend()} }
	for name, item := range map[string]func(*suite){
		"FairFIFO":            (*suite).fairFIFO,
		"CancelledWaiter":     (*suite).cancelledWaiter,
		"CancelledFairWaiter": (*suite).cancelledFairWaiter,
		"CloseWithLocksHeld":  (*suite).closeWithLocksHeld,
		"WokenNotPolling":     (*suite).wokenNotPolling,
	} {
		t.Run(name, func(t *testing.T) {
			stop := watchdog(t, time.Minute)
			defer stop()
			item(&suite{t: t, f: f, cfg: config{ttl: 500 * time.Millisecond}, prefix: "self/" + name + "/"})
		})
	}
}
