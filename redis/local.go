package redis

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// newTag returns 16 random hex digits, the start of every request id of
// the Backends of one peer group.
func newTag() string {
	const hex = "0123456789abcdef"
	var buf [16]byte
	a := rand.Uint64()
	for i := range buf {
		buf[i] = hex[a>>(60-4*i)&15]
	}
	return string(buf[:])
}

// peers are the Backends of this process on one server (the same
// description), which hand locks to each other's fair waiters. The release
// script does not publish a queue head that carries the releaser's tag;
// the releasing Backend wakes that waiter itself, through the group's
// waiters, without a round trip through the server's pub/sub. Backends on
// other servers have groups, tags and ids of their own, so their waiters
// never mix.
type peers struct {
	key    string // the description of the server
	refs   int    // Backends in the group; guarded by peerGroupsMu
	tag    string
	tagArg any // tag as a script argument
	lastID atomic.Uint64
	fair   waiterSet
}

var (
	peerGroupsMu sync.Mutex
	peerGroups   = map[string]*peers{}
)

// joinPeers returns the group of the Backends on server key, made if
// needed; leave it with leavePeers.
func joinPeers(key string) *peers {
	peerGroupsMu.Lock()
	defer peerGroupsMu.Unlock()
	p := peerGroups[key]
	if p == nil {
		p = &peers{key: key, tag: newTag(), fair: waiterSet{m: make(map[string]*waiter), byLock: make(map[string][]*waiter)}}
		p.tagArg = p.tag
		peerGroups[key] = p
	}
	p.refs++
	return p
}

// leavePeers drops a Backend from p, and p once it has none.
func leavePeers(p *peers) {
	peerGroupsMu.Lock()
	defer peerGroupsMu.Unlock()
	if p.refs--; p.refs == 0 {
		delete(peerGroups, p.key)
	}
}

// newID returns a request id, unique among the processes that share a
// server: the group's tag and a counter.
func (p *peers) newID() string {
	var buf [32]byte
	b := strconv.AppendUint(append(buf[:0], p.tag...), p.lastID.Add(1), 16)
	return string(b) // one allocation
}

// waiterSet holds the waiting fair acquisitions of a peer group by request
// id and by lock in the order they registered. A fair waiter is in it
// from before its first attempt (which may queue it) until it is granted
// or withdrawn.
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
	s.byLock[w.k.lock()] = append(s.byLock[w.k.lock()], w)
	s.mu.Unlock()
}

func (s *waiterSet) remove(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[w.rid] != w {
		return
	}
	delete(s.m, w.rid)
	ws := s.byLock[w.k.lock()]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(s.byLock, w.k.lock())
	} else {
		s.byLock[w.k.lock()] = ws
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
