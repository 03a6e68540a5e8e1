package notify

import "sync"

// Broadcast wakes every waiter at once: [Broadcast.Wait] returns a channel
// that the next [Broadcast.Broadcast] closes. Its zero value is ready to
// use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{} // nil until someone waits
}

// Wait returns a channel closed by the next Broadcast. Take it before
// looking at what it guards, so that no change after the look is missed.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Broadcast wakes everyone who called Wait before it.
func (b *Broadcast) Broadcast() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
