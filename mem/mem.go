// Package mem is an in-process dlock backend: locks shared by the
// goroutines of one process, with the semantics of the distributed
// backends (fencing tokens, TTL expiry, reentrancy, fair queueing, waiters
// woken on release). Use it for single-process programs and fast unit
// tests, not as a stand-in for a server in a backend's tests.
//
// It is also the template for a new backend (see [dlock.Backend]): one
// mutex stands for the store's atomicity, and the comments say which rule
// of the contract each step keeps.
//
// # URL
//
// Import the package for the "mem" scheme: "mem://" opens a fresh private
// store, "mem://NAME" the store of that name shared by everything in the
// process that opens it. Nothing else is accepted.
//
// # Constructors
//
// A [Store] is what a client is to the other backends: the caller owns it,
// [Store.Backend] makes a backend on it (the shape of their New), and
// closing that backend leaves the store to its other backends. [Named] is
// the store at an address; [New] a backend on a fresh store. There is no
// Open, ParseURL or Option: nothing is dialled, nothing can fail and
// nothing is configured, so they would be forms with nothing in them.
//
// # Guarantees
//
// Exact within the process, by one mutex per store. The longest TTL is
// [dlock.MaxTTL] (24 h), the Client's ceiling for backends that state
// none: mem could keep any duration, but a day bounds how long an
// abandoned hold blocks a lock.
//
// # State
//
// A store keeps an entry per name only while the name is held or waited
// on: a release that frees a name without waiters forgets it, and a hold
// that expired is forgotten by the next operation on the store (each
// operation frees up to 16 expired holds, earliest first, besides the name
// it works on). Tokens come from one counter per store, so they increase
// per name (and across names) without keeping anything per name.
package mem

import (
	"container/heap"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redact"
)

// The scheme makes the backend reachable by dlock.Open and the dlock
// command; a bad URL is refused with ErrInvalidOption, naming the URL.
func init() { dlock.Register("mem", openURL) }

func openURL(_ context.Context, u *url.URL) (dlock.Backend, error) {
	if u.Opaque != "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("%w: mem URL %q must be mem:// or mem://NAME", dlock.ErrInvalidOption, redact.URL(u))
	}
	if u.Host == "" {
		return New(), nil
	}
	return Named(u.Host).Backend(), nil
}

// Store is the lock state of one in-process lock space. Backends made from
// one Store see the same locks, like clients of one server. Its mutex is
// the store's atomicity: every operation below is one critical section, as
// a server's script or transaction would be.
type Store struct {
	name   string
	mu     sync.Mutex
	locks  map[string]*lock
	tokens uint64  // the last token granted, of any name
	holds  expHeap // the held locks, earliest expiry first
}

type lock struct {
	name    string
	idx     int    // in the Store's holds, or -1
	owner   string // "" when free
	count   int
	token   uint64
	expires time.Time
	queue   []*waiter // fair waiters in arrival order
	others  []*waiter // non-fair waiters in arrival order
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{locks: make(map[string]*lock)}
}

var named struct {
	sync.Mutex
	m map[string]*Store
}

// Named returns the process-wide store called name, creating it on first
// use.
func Named(name string) *Store {
	named.Lock()
	defer named.Unlock()
	if named.m == nil {
		named.m = make(map[string]*Store)
	}
	s := named.m[name]
	if s == nil {
		s = NewStore()
		s.name = name
		named.m[name] = s
	}
	return s
}

// Backend returns a new backend on the store.
func (s *Store) Backend() *Backend { return &Backend{s: s} }

// New returns a backend on a new private store.
func New() *Backend { return NewStore().Backend() }

// Backend is a dlock.Backend on a Store. It holds no lock state of its
// own: the Client keeps leases, renewal and loss, the store keeps holds.
type Backend struct {
	s      *Store
	closed sync.Once
}

// The Client finds the optional interfaces by type assertion; these
// assertions keep a signature change from silently dropping one.
var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
)

// String describes the backend.
func (b *Backend) String() string {
	if b.s.name != "" {
		return "mem " + b.s.name
	}
	return "mem"
}

// Close does nothing: the store lives on for its other backends, as a
// client the caller passed in outlives a backend made on it.
func (b *Backend) Close() error { return nil }

// get returns the state of name, creating it. s.mu is held.
func (s *Store) get(name string) *lock {
	l := s.locks[name]
	if l == nil {
		l = &lock{name: name, idx: -1}
		s.locks[name] = l
	}
	return l
}

// heldLocked reports whether l is held at now, freeing it if it expired.
// s.mu is held.
func (s *Store) heldLocked(l *lock, now time.Time) bool {
	if l.owner != "" && !now.Before(l.expires) {
		s.free(l)
	}
	return l.owner != ""
}

// free ends the hold of l. s.mu is held.
func (s *Store) free(l *lock) {
	l.owner, l.count = "", 0
	if l.idx >= 0 {
		heap.Remove(&s.holds, l.idx)
	}
	l.wakeFirst()
}

// expire sets the end of the hold of l. s.mu is held.
func (s *Store) expire(l *lock, t time.Time) {
	l.expires = t
	if l.idx < 0 {
		heap.Push(&s.holds, l)
	} else {
		heap.Fix(&s.holds, l.idx)
	}
}

// sweep frees up to 16 holds that expired and forgets their names if
// nobody waits: the bounded share of reclamation each operation does.
// s.mu is held.
func (s *Store) sweep(now time.Time) {
	for range 16 {
		if len(s.holds) == 0 || now.Before(s.holds[0].expires) {
			return
		}
		l := s.holds[0]
		s.free(l)
		s.tidy(l.name, l)
	}
}

// expHeap orders held locks by expiry.
type expHeap []*lock

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *expHeap) Push(x any) {
	l := x.(*lock)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *expHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}

// first is the waiter a change of the lock concerns: the head of the fair
// queue, else the earliest non-fair waiter. Only it is woken when the lock
// frees, and only it watches the holder's expiry, so a release costs one
// wake-up however many wait (no herd).
func (l *lock) first() *waiter {
	switch {
	case len(l.queue) > 0:
		return l.queue[0]
	case len(l.others) > 0:
		return l.others[0]
	}
	return nil
}

// wakeFirst wakes the first waiter: to try (the lock is free) or to watch
// the expiry of a hold it is now first for.
func (l *lock) wakeFirst() {
	if w := l.first(); w != nil {
		select {
		case w.wake <- struct{}{}:
		default: // already woken
		}
	}
}

// tidy forgets a lock state that holds nothing. s.mu is held.
func (s *Store) tidy(name string, l *lock) {
	if l.owner == "" && len(l.queue) == 0 && len(l.others) == 0 {
		delete(s.locks, name)
	}
}

// try is one atomic attempt for req by waiter w (nil for a newcomer): it
// re-enters the owner's own hold (the same token, count+1), refuses naming
// the holder (a *dlock.HeldError lets Lock report who holds it), or grants
// with a token from the store's counter, which never goes back. s.mu is
// held.
func (s *Store) try(req dlock.Request, w *waiter, now time.Time) (dlock.Grant, error) {
	l := s.get(req.Name)
	if s.heldLocked(l, now) {
		if l.owner == req.Owner {
			l.count++
			s.expire(l, later(l.expires, now.Add(req.TTL)))
			return dlock.Grant{Token: l.token, Count: l.count}, nil
		}
		return dlock.Grant{}, &dlock.HeldError{Holder: dlock.Holder{Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now)}}
	}
	// Free: fair waiters go first, in order.
	if len(l.queue) > 0 && (w == nil || l.queue[0] != w) {
		return dlock.Grant{}, fmt.Errorf("%w: free, but %d fair waiter(s) are queued first", dlock.ErrNotAcquired, len(l.queue))
	}
	if w != nil && len(l.queue) > 0 {
		l.queue = l.queue[1:]
		w.queued = false
		l.wakeFirst() // the new first watches the new hold's expiry
	}
	s.tokens++
	l.owner, l.count, l.token = req.Owner, 1, s.tokens
	s.expire(l, now.Add(req.TTL))
	return dlock.Grant{Token: l.token, Count: 1}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Acquire makes one attempt; see dlock.Backend. A refused request that
// will wait gets a Waiter that is already registered (in the fair queue, or
// counted for Inspect), as the contract asks; one that will not wait
// leaves nothing behind.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	// An ended ctx is answered at once, as a server call would be.
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(time.Now())
	var w *waiter
	if req.Wait && req.Fair {
		// A fair request takes its place in the queue before it looks, so
		// that it cannot pass those already waiting.
		l := s.get(req.Name)
		if len(l.queue) > 0 || s.heldLocked(l, time.Now()) && l.owner != req.Owner {
			w = &waiter{s: s, req: req, queued: true, wake: make(chan struct{}, 1)}
			l.queue = append(l.queue, w)
		}
	}
	g, err := s.try(req, w, time.Now())
	if err != nil {
		if !req.Wait {
			s.tidy(req.Name, s.get(req.Name))
			return dlock.Grant{}, nil, err
		}
		if w == nil {
			w = &waiter{s: s, req: req, counted: true, wake: make(chan struct{}, 1)}
			l := s.get(req.Name)
			l.others = append(l.others, w)
		}
		return dlock.Grant{}, w, err
	}
	return g, nil, nil
}

type waiter struct {
	s      *Store
	req    dlock.Request
	queued bool
	// counted says that a non-fair waiter is in its lock's others; it
	// leaves them when granted or cancelled.
	counted bool
	wake    chan struct{} // a token when the waiter should look again
}

// Wait blocks until the lock changes or its holder's TTL runs out: it is
// woken by the release itself, never by polling, and returns at once when
// the lock is already free for it. An early return is allowed; the
// Client's next Acquire tells.
func (w *waiter) Wait(ctx context.Context) error {
	s := w.s
	s.mu.Lock()
	l := s.get(w.req.Name)
	now := time.Now()
	free := !s.heldLocked(l, now)
	if free && (w.queued && l.queue[0] == w || !w.queued && len(l.queue) == 0) {
		s.mu.Unlock()
		return ctx.Err()
	}
	ch := w.wake
	var left time.Duration = -1
	if l.owner != "" && l.first() == w {
		left = l.expires.Sub(now)
	}
	s.mu.Unlock()
	var expired <-chan time.Time
	if left >= 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-ch:
	case <-expired:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Acquire makes the waiter's next attempt.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, err
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	var qw *waiter
	if w.queued {
		qw = w
	}
	g, err := w.s.try(w.req, qw, time.Now())
	if err == nil {
		w.uncount()
	}
	return g, err
}

// uncount takes a non-fair waiter out of its lock's count. s.mu is held.
func (w *waiter) uncount() {
	if !w.counted {
		return
	}
	w.counted = false
	l := w.s.get(w.req.Name)
	if i := slices.Index(l.others, w); i >= 0 {
		l.others = slices.Delete(l.others, i, i+1)
		if i == 0 {
			l.wakeFirst() // the new first watches the expiry, or tries
		}
	}
}

// Cancel withdraws the waiter and leaves nothing behind; when it was the
// head of the fair queue, the next waiter is signalled so that it is not
// held up by a waiter that is gone.
func (w *waiter) Cancel(context.Context) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.queued {
		if w.counted {
			w.uncount()
			s.tidy(w.req.Name, s.get(w.req.Name))
		}
		return nil
	}
	w.queued = false
	l := s.get(w.req.Name)
	if i := slices.Index(l.queue, w); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		if i == 0 {
			l.wakeFirst()
		}
	}
	s.tidy(w.req.Name, l)
	return nil
}

// owned returns the lock state of h if h still holds it, and otherwise an
// ErrLeaseLost error: Renew and Release act only for the owner and token
// that hold the name. s.mu is held.
func (s *Store) owned(h dlock.Hold, now time.Time) (*lock, error) {
	l := s.locks[h.Name]
	if l == nil || !s.heldLocked(l, now) {
		if l != nil {
			s.tidy(h.Name, l)
		}
		return nil, fmt.Errorf("%w: token %d expired or released", dlock.ErrLeaseLost, h.Token)
	}
	if l.owner != h.Owner || l.token != h.Token {
		return nil, fmt.Errorf("%w: held by %q with token %d", dlock.ErrLeaseLost, l.owner, l.token)
	}
	return l, nil
}

// Renew extends a hold.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.s.renew(h, ttl, time.Now())
}

func (s *Store) renew(h dlock.Hold, ttl time.Duration, now time.Time) error {
	l, err := s.owned(h, now)
	if err != nil {
		return err
	}
	s.expire(l, now.Add(ttl))
	return nil
}

// RenewBatch renews many holds at once.
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	now := time.Now()
	for i, r := range rs {
		errs[i] = b.s.renew(r.Hold, r.TTL, now)
	}
	return errs
}

// Release gives up one hold; at count zero it frees the name, which wakes
// its waiters (see free).
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.owned(h, time.Now())
	if err != nil {
		return err
	}
	l.count--
	if l.count == 0 {
		s.free(l)
		s.tidy(h.Name, l)
	}
	s.sweep(time.Now())
	return nil
}

// Count returns how many names starting with prefix the store keeps state
// for: names held or waited on, and holds that expired and were not yet
// swept (see State).
func (s *Store) Count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for name := range s.locks {
		if strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

// Inspect lists the held locks whose names start with prefix.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []dlock.LockInfo
	for name, l := range s.locks {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if !s.heldLocked(l, now) {
			s.tidy(name, l)
			continue
		}
		out = append(out, dlock.LockInfo{Name: name, Owner: l.owner, Token: l.token, Count: l.count, TTL: l.expires.Sub(now), Waiters: len(l.queue) + len(l.others)})
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
