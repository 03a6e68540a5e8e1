package connect

import (
	"errors"
	"sync"
	"syscall"
)

// Refusals tells an Open that every address of its store refused a
// connection, so that it fails at once instead of letting a driver that
// retries refused dials (gRPC, go-zookeeper) wait out the connect timeout.
// Nothing listens there: waiting would not change the answer, and the
// other backends' drivers give up on a refusal at once too.
type Refusals struct {
	mu   sync.Mutex
	left map[string]bool // addresses that have not refused yet
	ok   bool            // a connection was established: never fire
	err  error           // the latest refusal
	all  chan struct{}
}

// NewRefusals returns Refusals for the addresses ("host:port") that the
// driver dials; nil (which never fires) when addrs is empty.
func NewRefusals(addrs []string) *Refusals {
	if len(addrs) == 0 {
		return nil
	}
	r := &Refusals{left: make(map[string]bool), all: make(chan struct{})}
	for _, a := range addrs {
		r.left[a] = true
	}
	return r
}

// Note records the outcome of a dial of addr.
func (r *Refusals) Note(addr string, err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ok || len(r.left) == 0:
	case err == nil:
		r.ok = true
	case errors.Is(err, syscall.ECONNREFUSED) && r.left[addr]:
		delete(r.left, addr)
		r.err = err
		if len(r.left) == 0 {
			close(r.all)
		}
	}
}

// All returns a channel closed when every address has refused a dial
// while none accepted one; nil for nil Refusals.
func (r *Refusals) All() <-chan struct{} {
	if r == nil {
		return nil
	}
	return r.all
}

// Err returns the latest refusal, or nil.
func (r *Refusals) Err() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
