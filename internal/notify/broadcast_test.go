package notify

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestBroadcast(t *testing.T) {
	var b Broadcast
	b.Broadcast() // nobody waits: nothing to do
	w1, w2 := b.Wait(), b.Wait()
	if w1 != w2 {
		t.Error("two Waits before a Broadcast returned different channels")
	}
	if closed(w1) {
		t.Fatal("Wait's channel is closed before a Broadcast")
	}
	b.Broadcast()
	if !closed(w1) {
		t.Fatal("Broadcast did not close Wait's channel")
	}
	if closed(b.Wait()) {
		t.Error("a Wait after the Broadcast returned a closed channel")
	}
}

// relayProbe is a watcher that counts its runs and checks they never
// overlap.
type relayProbe struct {
	running, runs, overlaps atomic.Int32
	ready                   bool // call ready at once
}

func (p *relayProbe) watch(ctx context.Context, ready func()) {
	if p.running.Add(1) > 1 {
		p.overlaps.Add(1)
	}
	p.runs.Add(1)
	if p.ready {
		ready()
	}
	<-ctx.Done()
	time.Sleep(10 * time.Millisecond) // giving back what it held
	p.running.Add(-1)
}

func TestRelayRunsWhileSubscribed(t *testing.T) {
	p := &relayProbe{ready: true}
	r := NewRelay(p.watch)
	defer r.Close()
	ctx := context.Background()
	s1, err := r.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := r.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.runs.Load(); n != 1 {
		t.Fatalf("%d runs for two subscribers, want 1", n)
	}
	ch := s1.Changed()
	r.Broadcast()
	if !closed(ch) {
		t.Error("Broadcast did not close Changed's channel")
	}
	s1.Close()
	s1.Close() // twice is fine
	if p.running.Load() != 1 {
		t.Error("the watcher stopped with a subscriber left")
	}
	s2.Close()
	eventually(t, "the watcher stopped", func() bool { return p.running.Load() == 0 })
	// A new subscriber starts a new run, after the last one returned.
	for range 3 {
		s, err := r.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	eventually(t, "the watcher stopped", func() bool { return p.running.Load() == 0 })
	if n := p.overlaps.Load(); n != 0 {
		t.Errorf("%d runs overlapped the previous one", n)
	}
}

func TestRelayClose(t *testing.T) {
	p := &relayProbe{ready: true}
	r := NewRelay(p.watch)
	s, err := r.Subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Changed()
	r.Close()
	if p.running.Load() != 0 {
		t.Error("Close returned with the watcher running")
	}
	if !closed(ch) {
		t.Error("Close did not wake the subscribers")
	}
	if _, err := r.Subscribe(context.Background()); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	s.Close()
}

// TestRelaySubscribeWaitsForReady: Subscribe returns when the watcher is
// ready, or with ctx's error.
func TestRelaySubscribeWaitsForReady(t *testing.T) {
	p := &relayProbe{} // never ready
	r := NewRelay(p.watch)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Subscribe(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe to a watcher never ready: %v, want DeadlineExceeded", err)
	}
	eventually(t, "the watcher stopped once its subscriber left", func() bool { return p.running.Load() == 0 })
}

// TestRelayLinger: with Linger, a subscriber that comes back within it
// finds the same watcher running; the watcher stops once the linger
// passes with nobody subscribed, and Close ends it during a linger.
func TestRelayLinger(t *testing.T) {
	p := &relayProbe{ready: true}
	r := NewRelay(p.watch)
	r.Linger(200 * time.Millisecond)
	ctx := context.Background()
	for range 5 {
		s, err := r.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if n := p.runs.Load(); n != 1 {
		t.Errorf("%d runs for subscribers within the linger, want 1", n)
	}
	if p.running.Load() != 1 {
		t.Error("the watcher stopped at once despite the linger")
	}
	eventually(t, "the watcher stopped after the linger", func() bool { return p.running.Load() == 0 })
	s, err := r.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	r.Close()
	if p.running.Load() != 0 {
		t.Error("Close returned with a lingering watcher running")
	}
	if n := p.overlaps.Load(); n != 0 {
		t.Errorf("%d runs overlapped the previous one", n)
	}
}
