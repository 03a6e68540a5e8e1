package sqllock

import (
	"context"
	"sync"
)

// Local is the in-process state that the engines on one store share: a
// per-name notification that wakes the waiters of this process at once
// when a lock is released here, and a write lock that serializes this
// process's writing statements so that they queue in Go instead of
// spinning in the database's busy handler. Engines on the same database
// (file, table) in one process should share one Local; engines on
// different stores must not (they would only wake each other in vain).
type Local struct {
	write chan struct{} // a semaphore of one

	mu    sync.Mutex
	names map[string]*nameWatch
}

// nameWatch is the notification of one name, kept while waiters use it.
type nameWatch struct {
	ch   chan struct{} // closed at the next change; replaced then
	refs int
}

// NewLocal returns a Local for one store.
func NewLocal() *Local {
	return &Local{write: make(chan struct{}, 1), names: make(map[string]*nameWatch)}
}

// lockWrite takes the write lock, or gives up when ctx is done.
func (l *Local) lockWrite(ctx context.Context) error {
	select {
	case l.write <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Local) unlockWrite() { <-l.write }

// watch registers interest in name; unwatch ends it.
func (l *Local) watch(name string) *nameWatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.names[name]
	if w == nil {
		w = &nameWatch{ch: make(chan struct{})}
		l.names[name] = w
	}
	w.refs++
	return w
}

func (l *Local) unwatch(name string, w *nameWatch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.refs--
	if w.refs == 0 && l.names[name] == w {
		delete(l.names, name)
	}
}

// changed returns the channel that the next signal of w's name closes.
func (l *Local) changed(w *nameWatch) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.ch
}

// signal wakes the waiters of name in this process.
func (l *Local) signal(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.names[name]; w != nil {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}
