package notify

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// Relay runs a watcher while it has subscribers, and wakes them all at
// every change the watcher reports ([Relay.Broadcast]). The first
// Subscribe starts the watcher, the Close of the last subscription stops
// it (by its context), and a new run starts only once the previous one has
// returned, so that two runs never hold the same resource.
type Relay struct {
	watch  func(ctx context.Context, ready func())
	gen    Broadcast
	linger time.Duration // how long the watcher outlives its last subscriber

	mu     sync.Mutex
	subs   int
	stop   context.CancelFunc // stops the running watcher; nil when none runs
	done   chan struct{}      // closed when the last watcher started has returned
	ready  chan struct{}      // closed when the running watcher called ready (or returned)
	idle   *time.Timer        // stops a watcher left without subscribers, after linger
	closed bool
}

// NewRelay returns a Relay that runs watch. watch runs until ctx is done;
// it calls ready once it watches (every change after that is reported) or
// has failed to (then it should Broadcast at every failure, so that the
// subscribers look for themselves), and Broadcast at every change.
func NewRelay(watch func(ctx context.Context, ready func())) *Relay {
	return &Relay{watch: watch}
}

// Linger keeps the watcher running for d after its last subscriber
// leaves, so that a waiter that comes back soon (the next contended
// acquisition) finds it ready instead of waiting for a new connection and
// its LISTEN. Call it before the first Subscribe.
func (r *Relay) Linger(d time.Duration) { r.linger = d }

// Subscription is a subscriber of a [Relay].
type Subscription struct {
	r    *Relay
	once sync.Once
}

// Changed returns a channel closed at the next change reported. Take it
// before looking at the store, so that no change after the look is missed.
func (s *Subscription) Changed() <-chan struct{} { return s.r.gen.Wait() }

// Close ends the subscription; the last one stops the watcher.
func (s *Subscription) Close() { s.once.Do(s.r.unsubscribe) }

// Subscribe registers a subscriber, starting the watcher if it is the
// first, and returns once the watcher is ready. It fails with
// [dlock.ErrClosed] after Close, and with ctx.Err() if ctx ends first.
func (r *Relay) Subscribe(ctx context.Context) (*Subscription, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, dlock.ErrClosed
	}
	r.subs++
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	if r.stop == nil {
		prev := r.done
		wctx, cancel := context.WithCancel(context.Background())
		r.stop, r.done, r.ready = cancel, make(chan struct{}), make(chan struct{})
		go r.run(wctx, prev, r.done, r.ready)
	}
	ready := r.ready
	r.mu.Unlock()
	s := &Subscription{r: r}
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
}

// Broadcast wakes every subscriber.
func (r *Relay) Broadcast() { r.gen.Broadcast() }

// Close stops the watcher, waits for it, and wakes every subscriber.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
	r.gen.Broadcast()
}

func (r *Relay) unsubscribe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs--
	if r.subs != 0 || r.stop == nil {
		return
	}
	if r.linger > 0 {
		r.idle = time.AfterFunc(r.linger, r.stopIdle)
		return
	}
	r.stop()
	r.stop = nil
}

// stopIdle stops the watcher if it still has no subscriber when its
// linger is over.
func (r *Relay) stopIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs == 0 && r.stop != nil {
		r.stop()
		r.stop = nil
	}
}

func (r *Relay) run(ctx context.Context, prev, done, ready chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev // the previous run has let go of what it held
	}
	var once sync.Once
	signal := func() { once.Do(func() { close(ready) }) }
	defer signal()
	r.watch(ctx, signal)
}
