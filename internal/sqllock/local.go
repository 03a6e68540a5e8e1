package sqllock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Local is the in-process state that the engines on one store (a database
// and lease table) share within a process:
//
//   - The Feed, so that a process polls the store once however many
//     engines it has on it.
//   - The waiters of this process, per name. A release (or a fair waiter
//     leaving) here wakes one of them at once — the fair waiter with the
//     lowest sequence if there is one, otherwise the plain waiter that has
//     waited longest — rather than all of them, which would then all try
//     and all but one fail. The woken waiter holds the baton until its
//     attempt is over; if it gives up before trying, the baton passes on.
//     While a baton is out, the other plain waiters of the name do not try
//     on their own. Changes made by other processes reach every waiter
//     through the Feed.
//   - The fair waiters of this process by queue sequence, so that a Feed
//     notice naming the fair waiter whose turn it is wakes that one only
//     (see turn).
//   - The last look at each name's state in the Feed's current generation:
//     every waiter woken by one change needs a look taken after the
//     change, and one look serves them all. A turn told by the Feed
//     starts a new epoch, in which no earlier look is served.
//   - Write locks that serialize this process's writing statements, so
//     that they queue in Go instead of in the database: one for all names
//     where the database has one writer (SQLite, whose busy handler
//     would make them wait), one per name where it has ConcurrentWrites
//     (where each would wait on the name's row holding a connection).
//
// Engines on different stores must not share a Local.
type Local struct {
	feed Feed

	mu      sync.Mutex
	names   map[string]*nameState
	bySeq   map[int64]*slot       // the fair waiters by queue sequence
	epoch   uint64                // turns told so far; see cachedLook
	writers map[string]*writeLock // by name; "" is the lock for all names
}

// writeLock is a semaphore of one, with the number of its users (holding
// or waiting), so that it is dropped when unused.
type writeLock struct {
	ch   chan struct{}
	refs int
}

type nameState struct {
	slots []*slot // registered waiters in registration order
	look  *cachedLook
}

// cachedLook is a look at a lock's state taken in the feed generation gen
// (nil without a Feed) and the Local's epoch, at the local time at. A
// turn (see Local.turn) changes the lock's state without a new
// generation, so a look is served only in the epoch it was taken in.
type cachedLook struct {
	gen   <-chan struct{}
	epoch uint64
	s     lockState
	at    time.Time
	by    *slot // the waiter that took it; nil for others
}

// slot is one waiter's registration.
type slot struct {
	name   string
	fair   bool
	seq    int64         // fair: the queue row's sequence
	ch     chan struct{} // closed when the waiter is woken
	woken  bool          // ch is closed and the waiter has not tried since
	trying bool          // the waiter's attempt is in flight
	turn   bool          // fair: woken by a turn, to try without a look
}

// NewLocal returns a Local for one store, with feed (nil: none). Close
// closes the feed.
func NewLocal(feed Feed) *Local {
	l := &Local{feed: feed, names: make(map[string]*nameState), bySeq: make(map[int64]*slot), writers: make(map[string]*writeLock)}
	if t, ok := feed.(interface{ setTurn(func(int64)) }); ok {
		t.setTurn(l.turn)
	}
	return l
}

// Close closes the feed.
func (l *Local) Close() error {
	if l.feed == nil {
		return nil
	}
	return l.feed.Close()
}

// lockWrite takes the write lock key, or gives up when ctx is done.
func (l *Local) lockWrite(ctx context.Context, key string) error {
	l.mu.Lock()
	w := l.writers[key]
	if w == nil {
		w = &writeLock{ch: make(chan struct{}, 1)}
		l.writers[key] = w
	}
	w.refs++
	l.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		l.dropWriter(key, w)
		l.mu.Unlock()
		return ctx.Err()
	}
}

// tryLockWrite takes the write lock key if it is free, without waiting.
func (l *Local) tryLockWrite(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.writers[key]
	if w == nil {
		w = &writeLock{ch: make(chan struct{}, 1)}
		l.writers[key] = w
	}
	select {
	case w.ch <- struct{}{}:
		w.refs++
		return true
	default:
		if w.refs == 0 {
			delete(l.writers, key)
		}
		return false
	}
}

// unlockWrite releases the write lock key that lockWrite took.
func (l *Local) unlockWrite(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.writers[key]
	<-w.ch
	l.dropWriter(key, w)
}

// dropWriter ends a use of w, the write lock key. l.mu is held.
func (l *Local) dropWriter(key string, w *writeLock) {
	if w.refs--; w.refs == 0 {
		delete(l.writers, key)
	}
}

// name returns the state of name, creating it. l.mu is held.
func (l *Local) name(name string) *nameState {
	n := l.names[name]
	if n == nil {
		n = &nameState{}
		l.names[name] = n
	}
	return n
}

// register adds a waiter for name.
func (l *Local) register(name string, fair bool, seq int64) *slot {
	s := &slot{name: name, fair: fair, seq: seq, ch: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.name(name)
	n.slots = append(n.slots, s)
	if fair {
		l.bySeq[seq] = s
	}
	return s
}

// unregister removes s; if it held the baton without trying, the next
// waiter gets it.
func (l *Local) unregister(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names[s.name]
	if n == nil {
		return
	}
	if i := slices.Index(n.slots, s); i >= 0 {
		n.slots = slices.Delete(n.slots, i, i+1)
	}
	if s.fair && l.bySeq[s.seq] == s {
		delete(l.bySeq, s.seq)
	}
	if len(n.slots) == 0 {
		delete(l.names, s.name)
		return
	}
	if s.woken || s.trying {
		s.woken, s.trying = false, false
		l.wakeLocked(n)
	}
}

// setSeq records a fair waiter's new sequence (it queued again).
func (l *Local) setSeq(s *slot, seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySeq[s.seq] == s {
		delete(l.bySeq, s.seq)
	}
	s.seq = seq
	l.bySeq[seq] = s
}

// changed returns the channel that wakes s.
func (l *Local) changed(s *slot) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.ch
}

// consume uses up a wake-up that s got: a fair waiter calls it before it
// looks, a plain one before it tries (then with trying, until tried). It
// returns the channel of the next wake-up.
func (l *Local) consume(s *slot, trying bool) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.woken {
		s.woken = false
		s.trying = trying
		s.ch = make(chan struct{})
	}
	s.turn = false
	return s.ch
}

// turn is told by the Feed that a lock was freed (or its queue changed)
// and that it is the turn of the fair waiter with queue sequence seq, the
// only one that can take it now. If that waiter is in this process, it is
// woken to try at once, without a look; no other waiter is woken. Every
// cached look may now be stale, so a new epoch starts.
func (l *Local) turn(seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	s := l.bySeq[seq]
	if s == nil {
		return
	}
	s.turn = true
	if !s.woken {
		s.woken = true
		close(s.ch)
	}
}

// takeTurn reports whether s, woken, was woken by a turn, and clears it.
func (l *Local) takeTurn(s *slot) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := s.turn
	s.turn = false
	return t
}

// epochNow returns the current epoch; see cachedLook.
func (l *Local) epochNow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// tried ends the attempt that consume(s, true) began.
func (l *Local) tried(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.trying = false
}

// claim gives s, a plain waiter that found its lock free, the baton of
// its name: it reports false, and s waits on, while another plain waiter
// of the name here was woken or is trying; otherwise s is marked trying
// until tried. So a change that another process committed, which every
// waiter here sees, sends one of them to try, not all.
func (l *Local) claim(s *slot) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.names[s.name]; n != nil {
		for _, o := range n.slots {
			if o != s && !o.fair && (o.woken || o.trying) {
				return false
			}
		}
	}
	s.trying = true
	return true
}

// signal wakes one waiter of name in this process (see Local) and drops
// the cached look, which the change made stale.
func (l *Local) signal(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.names[name]; n != nil {
		n.look = nil
		l.wakeLocked(n)
	}
}

func (l *Local) wakeLocked(n *nameState) {
	var next *slot
	for _, s := range n.slots {
		if s.fair && (next == nil || !next.fair || s.seq < next.seq) {
			next = s
		}
	}
	if next != nil {
		if !next.woken {
			next.woken = true
			close(next.ch)
		}
		return // the fair waiter first in line (awake already or now)
	}
	// The plain waiter that has waited longest and is not awake yet.
	for _, s := range n.slots {
		if !s.woken && !s.trying {
			s.woken = true
			close(s.ch)
			return
		}
	}
}

// pollShare is how long, without a Feed, a look at a lock serves the
// other waiters of the process on its name: they then read the store at
// most once per pollShare between them, however many they are, rather
// than each on its own backing-off schedule.
const pollShare = 20 * time.Millisecond

// cached returns the look at name taken in the feed generation gen (or,
// without a Feed, less than pollShare ago by another waiter than by), with
// its remaining times brought up to now, if there is one. Without a Feed a
// waiter's own look never stands in for its next one: its own schedule
// says when it looks again, and a fair waiter's is how fast it notices a
// release.
func (l *Local) cached(name string, gen <-chan struct{}, by *slot) (lockState, bool) {
	if gen == nil && l.feed != nil {
		return lockState{}, false // not subscribed yet: no generation
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names[name]
	if n == nil || n.look == nil || n.look.gen != gen || n.look.epoch != l.epoch {
		return lockState{}, false
	}
	s := n.look.s
	age := time.Since(n.look.at)
	if l.feed == nil && (age >= pollShare || by != nil && n.look.by == by) {
		return lockState{}, false
	}
	s.remaining -= age
	s.queueTTL -= age
	// An expiry commits nothing, so no feed reports it, and a fair
	// waiter's heartbeat is not reported either: once the holder's lease
	// or the first fair waiter's row may have run out, the look is stale.
	if n.look.s.remaining > 0 && s.remaining <= 0 || s.head != NoSeq && s.queueTTL <= 0 {
		return lockState{}, false
	}
	return s, true
}

// cache keeps a look at name taken by the waiter by (nil: not a waiter)
// in the feed generation gen and the epoch, at local time at (both taken
// before the read). A look taken in an earlier epoch is not kept.
func (l *Local) cache(name string, by *slot, gen <-chan struct{}, epoch uint64, s lockState, at time.Time) {
	if gen == nil && l.feed != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.names[name]; n != nil && epoch == l.epoch {
		n.look = &cachedLook{gen: gen, epoch: epoch, s: s, at: at, by: by}
	}
}

// forget drops the cached look at name: this process changed the lock.
func (l *Local) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.names[name]; n != nil {
		n.look = nil
	}
}
