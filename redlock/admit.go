package redlock

import (
	"context"
	"slices"
	"sync"
)

// admission bounds the acquisition attempts of a Backend that are under
// way at once. A burst of Locks (a herd of waiters making their first
// attempt) otherwise puts thousands of calls in the process's run queue
// together, and calls whose masters answered in time time out waiting for
// a CPU to read the answer: a quorum of "timeouts" on masters that were
// fine. The bound adapts as TCP's window does: it halves when an attempt
// had a master answer too late, and grows by one with each attempt that
// heard every master in time, between minAttempts and maxAttempts.
// Attempts beyond it wait their turn in arrival order, before their node
// timeouts start.
type admission struct {
	mu    sync.Mutex
	limit int // 0 until the first attempt: maxAttempts
	busy  int
	queue []chan struct{}
}

const (
	minAttempts = 2
	maxAttempts = 64
)

// enter waits for the attempt's turn, or for ctx.
func (a *admission) enter(ctx context.Context) error {
	a.mu.Lock()
	if a.limit == 0 {
		a.limit = maxAttempts
	}
	if a.busy < a.limit && len(a.queue) == 0 {
		a.busy++
		a.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	a.queue = append(a.queue, turn)
	a.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if i := slices.Index(a.queue, turn); i >= 0 {
		a.queue = slices.Delete(a.queue, i, i+1)
		a.mu.Unlock()
		return ctx.Err()
	}
	a.mu.Unlock()
	a.leave(false) // the turn came meanwhile: pass it on
	return ctx.Err()
}

// leave ends an attempt; late says whether a master answered it too late.
func (a *admission) leave(late bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if late {
		a.limit = max(a.limit/2, minAttempts)
	} else {
		a.limit = min(a.limit+1, maxAttempts)
	}
	a.busy--
	for a.busy < a.limit && len(a.queue) > 0 {
		close(a.queue[0])
		a.queue = a.queue[1:]
		a.busy++
	}
}
