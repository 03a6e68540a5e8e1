package redis

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// procTag starts every request id made by this process: 16 random hex
// digits. The release script does not publish a queue head that carries
// the releaser's tag; the releasing process wakes that waiter itself
// (fairWaiters), without a round trip through the server's pub/sub.
var procTag = func() string {
	const hex = "0123456789abcdef"
	var buf [16]byte
	a := rand.Uint64()
	for i := range buf {
		buf[i] = hex[a>>(60-4*i)&15]
	}
	return string(buf[:])
}()

// procTagArg is procTag as a script argument.
var procTagArg any = procTag

var lastID atomic.Uint64

// newID returns a request id, unique among the processes that share a
// server: the process's tag and a counter.
func newID() string {
	var buf [32]byte
	b := strconv.AppendUint(append(buf[:0], procTag...), lastID.Add(1), 16)
	return string(b) // one allocation
}

// fairWaiters are the waiting fair acquisitions of this process, of every
// Backend, by request id and by lock in the order they registered. A fair
// waiter is in it from before its first attempt (which may queue it) until
// it is granted or withdrawn.
var fairWaiters = waiterSet{m: make(map[string]*waiter), byLock: make(map[string][]*waiter)}

type waiterSet struct {
	mu     sync.Mutex
	m      map[string]*waiter
	byLock map[string][]*waiter
}

// handoff is a grant that a release in this process made for a waiter.
type handoff struct {
	token uint64
	sent  time.Time // when the release was sent
}

func (s *waiterSet) add(w *waiter) {
	s.mu.Lock()
	s.m[w.rid] = w
	s.byLock[w.k.lock] = append(s.byLock[w.k.lock], w)
	s.mu.Unlock()
}

func (s *waiterSet) remove(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[w.rid] != w {
		return
	}
	delete(s.m, w.rid)
	ws := s.byLock[w.k.lock]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(s.byLock, w.k.lock)
	} else {
		s.byLock[w.k.lock] = ws
	}
}

// first returns the waiter of lock that registered first, the likeliest
// head of its queue, or nil.
func (s *waiterSet) first(lock string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.byLock[lock]; len(ws) > 0 {
		return ws[0]
	}
	return nil
}

// wake wakes the waiter with request id rid, if it is still waiting.
func (s *waiterSet) wake(rid string) {
	s.mu.Lock()
	w := s.m[rid]
	s.mu.Unlock()
	if w != nil {
		w.signal()
	}
}

// handOff gives w the grant a release made for it, and wakes it.
func (s *waiterSet) handOff(w *waiter, h *handoff) {
	s.mu.Lock()
	w.handoff = h
	s.mu.Unlock()
	w.signal()
}

// takeHandoff returns the grant a release made for w, if any.
func (s *waiterSet) takeHandoff(w *waiter) *handoff {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := w.handoff
	w.handoff = nil
	return h
}

// wakeLock wakes every waiter of the lock whose hash is lock: after a
// release whose outcome is unknown, they try again rather than wait for a
// notice that may never come.
func (s *waiterSet) wakeLock(lock string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.byLock[lock] {
		w.signal()
	}
}
