// Package mem is an in-process dlock backend: locks shared by the
// goroutines of one process, with the same semantics as the distributed
// backends (fencing tokens, TTL expiry, reentrancy, fair queueing, waiters
// woken on release). Use it for single-process programs and fast unit
// tests; it is not a stand-in for a real server in backend tests.
//
// Import it for the "mem" URL scheme: "mem://" opens a fresh private store,
// "mem://NAME" the store of that name shared by everything in the process
// that opens it.
package mem

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

func init() {
	dlock.Register("mem", func(_ context.Context, u *url.URL) (dlock.Backend, error) {
		if u.Opaque != "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("%w: mem URL %q must be mem:// or mem://NAME", dlock.ErrInvalidOption, u.Redacted())
		}
		if u.Host == "" {
			return New(), nil
		}
		return Named(u.Host).Backend(), nil
	})
}

// Store is the lock state of one in-process lock space. Backends made from
// one Store see the same locks, like clients of one server.
type Store struct {
	name   string
	mu     sync.Mutex
	locks  map[string]*lock
	tokens map[string]uint64 // the last token of every name ever granted; never shrinks
}

type lock struct {
	owner   string // "" when free
	count   int
	token   uint64
	expires time.Time
	changed chan struct{} // closed when the lock frees or the queue head leaves
	queue   []*waiter     // fair waiters in arrival order
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{locks: make(map[string]*lock), tokens: make(map[string]uint64)}
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

// Backend is a dlock.Backend on a Store.
type Backend struct {
	s      *Store
	closed sync.Once
}

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

// Close does nothing: the store lives on for its other backends.
func (b *Backend) Close() error { return nil }

// get returns the state of name, creating it. s.mu is held.
func (s *Store) get(name string) *lock {
	l := s.locks[name]
	if l == nil {
		l = &lock{changed: make(chan struct{})}
		s.locks[name] = l
	}
	return l
}

// heldLocked reports whether l is held at now, freeing it if it expired.
func (l *lock) heldLocked(now time.Time) bool {
	if l.owner != "" && !now.Before(l.expires) {
		l.owner, l.count = "", 0
		l.signal()
	}
	return l.owner != ""
}

func (l *lock) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// tidy forgets a lock state that holds nothing. s.mu is held.
func (s *Store) tidy(name string, l *lock) {
	if l.owner == "" && len(l.queue) == 0 {
		delete(s.locks, name)
	}
}

// try is one atomic attempt for req by waiter w (nil for a newcomer).
// s.mu is held.
func (s *Store) try(req dlock.Request, w *waiter, now time.Time) (dlock.Grant, error) {
	l := s.get(req.Name)
	if l.heldLocked(now) {
		if l.owner == req.Owner {
			l.count++
			l.expires = later(l.expires, now.Add(req.TTL))
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
		l.signal() // waiters look again: the lock is taken, and the queue has a new head
	}
	s.tokens[req.Name]++
	l.owner, l.count, l.token = req.Owner, 1, s.tokens[req.Name]
	l.expires = now.Add(req.TTL)
	return dlock.Grant{Token: l.token, Count: 1}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Acquire makes one attempt; see dlock.Backend.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var w *waiter
	if req.Wait && req.Fair {
		// A fair request takes its place in the queue before it looks, so
		// that it cannot pass those already waiting.
		l := s.get(req.Name)
		if len(l.queue) > 0 || l.heldLocked(time.Now()) && l.owner != req.Owner {
			w = &waiter{s: s, req: req, queued: true}
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
			w = &waiter{s: s, req: req}
		}
		return dlock.Grant{}, w, err
	}
	return g, nil, nil
}

type waiter struct {
	s      *Store
	req    dlock.Request
	queued bool
}

// Wait blocks until the lock changes or its holder's TTL runs out.
func (w *waiter) Wait(ctx context.Context) error {
	s := w.s
	s.mu.Lock()
	l := s.get(w.req.Name)
	now := time.Now()
	free := !l.heldLocked(now)
	if free && (w.queued && l.queue[0] == w || !w.queued && len(l.queue) == 0) {
		s.mu.Unlock()
		return ctx.Err()
	}
	ch := l.changed
	var left time.Duration = -1
	if l.owner != "" {
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
	return w.s.try(w.req, qw, time.Now())
}

// Cancel leaves the queue.
func (w *waiter) Cancel(context.Context) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.queued {
		return nil
	}
	w.queued = false
	l := s.get(w.req.Name)
	if i := slices.Index(l.queue, w); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		if i == 0 {
			l.signal()
		}
	}
	s.tidy(w.req.Name, l)
	return nil
}

// owned returns the lock state of h if h still holds it. s.mu is held.
func (s *Store) owned(h dlock.Hold, now time.Time) (*lock, error) {
	l := s.locks[h.Name]
	if l == nil || !l.heldLocked(now) {
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
	l.expires = now.Add(ttl)
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

// Release gives up one hold.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.owned(h, time.Now())
	if err != nil {
		if l := s.locks[h.Name]; l != nil {
			s.tidy(h.Name, l)
		}
		return err
	}
	l.count--
	if l.count == 0 {
		l.owner = ""
		l.signal()
		s.tidy(h.Name, l)
	}
	return nil
}

// Inspect lists the held locks whose names start with prefix.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []dlock.LockInfo
	for name, l := range s.locks {
		if !strings.HasPrefix(name, prefix) || !l.heldLocked(now) {
			continue
		}
		out = append(out, dlock.LockInfo{Name: name, Owner: l.owner, Token: l.token, Count: l.count, TTL: l.expires.Sub(now), Waiters: len(l.queue)})
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
