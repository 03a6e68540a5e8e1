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
	"cmp"
	"container/heap"
	"context"
	"errors"
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
	holds  expHeap // the holds, earliest expiry first
	// notices are the watched names' change signals: a channel closed
	// and replaced at every change of the name's holders.
	notices map[string]*notice
}

type notice struct {
	ch   chan struct{}
	subs int
}

// changed signals the watchers of name. s.mu is held.
func (s *Store) changed(name string) {
	if n := s.notices[name]; n != nil {
		close(n.ch)
		n.ch = make(chan struct{})
	}
}

// lock is the state of a name while it has holders or waiters: its kind
// and limit (recorded by the request that made it), its holders and its
// waiters.
type lock struct {
	name    string
	kind    dlock.Kind
	limit   int
	used    int       // the weights of holders
	holders []*hold   // in grant order
	queue   []*waiter // fair waiters in arrival order (every waiter of a weighted name)
	others  []*waiter // non-fair waiters in arrival order
}

// hold is one holder of a name.
type hold struct {
	l       *lock
	idx     int // in the Store's holds, or -1
	owner   string
	count   int
	weight  int
	token   uint64
	expires time.Time
	value   string
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{locks: make(map[string]*lock), notices: make(map[string]*notice)}
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
	_ dlock.Granter      = (*Backend)(nil)
	_ dlock.Downgrader   = (*Backend)(nil)
	_ dlock.Proclaimer   = (*Backend)(nil)
	_ dlock.Watcher      = (*Backend)(nil)
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

// get returns the state of req's name, creating it with req's kind and
// limit. s.mu is held.
func (s *Store) get(req dlock.Request) *lock {
	l := s.locks[req.Name]
	if l == nil {
		l = &lock{name: req.Name, kind: req.Kind, limit: max(req.Limit, 1)}
		s.locks[req.Name] = l
	}
	return l
}

// shape refuses req if its kind or limit differs from those recorded for
// l; a name with no holders nor waiters takes req's. s.mu is held.
func (l *lock) shape(req dlock.Request) error {
	if len(l.holders) == 0 && len(l.queue) == 0 && len(l.others) == 0 {
		l.kind, l.limit = req.Kind, max(req.Limit, 1)
		return nil
	}
	return dlock.Conflict(l.kind, l.limit, dlock.Request{Kind: req.Kind, Limit: max(req.Limit, 1)})
}

// prune frees the holds of l that expired at now. s.mu is held.
func (s *Store) prune(l *lock, now time.Time) {
	for i := 0; i < len(l.holders); {
		if h := l.holders[i]; !now.Before(h.expires) {
			s.drop(h)
			continue
		}
		i++
	}
}

// drop ends hold h, which frees its weight and wakes the first waiter.
// s.mu is held.
func (s *Store) drop(h *hold) {
	l := h.l
	if i := slices.Index(l.holders, h); i >= 0 {
		l.holders = slices.Delete(l.holders, i, i+1)
		l.used -= h.weight
	}
	if h.idx >= 0 {
		heap.Remove(&s.holds, h.idx)
	}
	l.wakeFirst()
	s.changed(l.name)
}

// find returns the hold of owner, or nil.
func (l *lock) find(owner string) *hold {
	for _, h := range l.holders {
		if h.owner == owner {
			return h
		}
	}
	return nil
}

// earliest returns the hold whose lease ends first, or nil.
func (l *lock) earliest() *hold {
	var e *hold
	for _, h := range l.holders {
		if e == nil || h.expires.Before(e.expires) {
			e = h
		}
	}
	return e
}

// fits reports whether weight w fits beside the holders.
func (l *lock) fits(w int) bool { return l.used+max(w, 1) <= l.limit }

// expire sets the end of hold h. s.mu is held.
func (s *Store) expire(h *hold, t time.Time) {
	h.expires = t
	if h.idx < 0 {
		heap.Push(&s.holds, h)
	} else {
		heap.Fix(&s.holds, h.idx)
	}
}

// sweep frees up to 16 holds that expired and forgets their names if
// nobody holds or waits: the bounded share of reclamation each operation
// does. s.mu is held.
func (s *Store) sweep(now time.Time) {
	for range 16 {
		if len(s.holds) == 0 || now.Before(s.holds[0].expires) {
			return
		}
		h := s.holds[0]
		s.drop(h)
		s.tidy(h.l)
	}
}

// expHeap orders holds by expiry.
type expHeap []*hold

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *expHeap) Push(x any) {
	l := x.(*hold)
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
// queue, else the earliest non-fair waiter. Only it is woken when a hold
// ends, and only it watches the holders' expiry, so a release costs one
// wake-up however many wait (no herd); a waiter that is granted wakes the
// next, so every waiter that now fits is woken in turn.
func (l *lock) first() *waiter {
	switch {
	case len(l.queue) > 0:
		return l.queue[0]
	case len(l.others) > 0:
		return l.others[0]
	}
	return nil
}

// wakeFirst wakes the first waiter: to try (there may be room) or to
// watch the expiry of a hold it is now first for.
func (l *lock) wakeFirst() {
	if w := l.first(); w != nil {
		select {
		case w.wake <- struct{}{}:
		default: // already woken
		}
	}
}

// tidy forgets a lock state that holds nothing. s.mu is held.
func (s *Store) tidy(l *lock) {
	if len(l.holders) == 0 && len(l.queue) == 0 && len(l.others) == 0 && s.locks[l.name] == l {
		delete(s.locks, l.name)
	}
}

// try is one atomic attempt for req by waiter w (nil for a newcomer): it
// refuses a kind or limit other than the name's, re-enters the owner's own
// hold (the same token, count+1; more weight than it holds is an upgrade,
// refused), refuses naming a holder when the request does not fit or would
// pass an earlier fair waiter (a *dlock.HeldError lets Lock report who
// holds it), or grants with a token from the store's counter, which never
// goes back. s.mu is held.
func (s *Store) try(req dlock.Request, w *waiter, now time.Time) (dlock.Grant, error) {
	l := s.get(req)
	s.prune(l, now)
	if err := l.shape(req); err != nil {
		return dlock.Grant{}, err
	}
	if h := l.find(req.Owner); h != nil {
		if req.Weight > h.weight {
			return dlock.Grant{}, fmt.Errorf("holds %d, asks %d: %w", h.weight, req.Weight, dlock.ErrUpgrade)
		}
		h.count++
		s.expire(h, later(h.expires, now.Add(req.TTL)))
		s.changed(l.name)
		return dlock.Grant{Token: h.token, Count: h.count}, nil
	}
	if !l.fits(req.Weight) {
		return dlock.Grant{}, l.held(now)
	}
	// Room: fair waiters go first, in order.
	if len(l.queue) > 0 && (w == nil || l.queue[0] != w) {
		if l.limit > 1 {
			e := l.held(now)
			e.Queued = len(l.queue)
			return dlock.Grant{}, e
		}
		return dlock.Grant{}, fmt.Errorf("%w: free, but %d fair waiter(s) are queued first", dlock.ErrNotAcquired, len(l.queue))
	}
	if w != nil && len(l.queue) > 0 {
		l.queue = l.queue[1:]
		w.queued = false
		l.wakeFirst() // the new first tries (it may fit too) or watches the expiry
	}
	s.tokens++
	h := &hold{l: l, idx: -1, owner: req.Owner, count: 1, weight: max(req.Weight, 1), token: s.tokens, value: req.Value}
	l.holders = append(l.holders, h)
	l.used += h.weight
	s.expire(h, now.Add(req.TTL))
	s.changed(l.name)
	return dlock.Grant{Token: h.token, Count: 1}, nil
}

// held returns the refusal of a request that does not fit: the holder
// whose lease ends first, and for a weighted name what is held of what.
func (l *lock) held(now time.Time) *dlock.HeldError {
	e := &dlock.HeldError{}
	if h := l.earliest(); h != nil {
		e.Holder = dlock.Holder{Owner: h.owner, Token: h.token, TTL: h.expires.Sub(now)}
	}
	if l.limit > 1 {
		e.Held, e.Limit = l.used, l.limit
	}
	return e
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
	now := time.Now()
	s.sweep(now)
	var w *waiter
	if req.Wait && req.Fair {
		// A fair request takes its place in the queue before it looks, so
		// that it cannot pass those already waiting.
		l := s.get(req)
		s.prune(l, now)
		if l.shape(req) == nil && l.find(req.Owner) == nil && (len(l.queue) > 0 || !l.fits(req.Weight)) {
			w = &waiter{s: s, req: req, queued: true, wake: make(chan struct{}, 1)}
			l.queue = append(l.queue, w)
		}
	}
	g, err := s.try(req, w, now)
	if err != nil {
		if !req.Wait || !errors.Is(err, dlock.ErrNotAcquired) {
			s.tidy(s.get(req))
			return dlock.Grant{}, nil, err
		}
		if w == nil {
			w = &waiter{s: s, req: req, counted: true, wake: make(chan struct{}, 1)}
			l := s.get(req)
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

// Wait blocks until a hold of the name ends or the first holder's TTL runs
// out: it is woken by the release itself, never by polling, and returns at
// once when there is room for it already. An early return is allowed; the
// Client's next Acquire tells.
func (w *waiter) Wait(ctx context.Context) error {
	s := w.s
	s.mu.Lock()
	l := s.get(w.req)
	now := time.Now()
	s.prune(l, now)
	if l.fits(w.req.Weight) && (w.queued && l.queue[0] == w || !w.queued && len(l.queue) == 0) {
		s.mu.Unlock()
		return ctx.Err()
	}
	ch := w.wake
	var left time.Duration = -1
	if h := l.earliest(); h != nil && l.first() == w {
		left = h.expires.Sub(now)
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
	l := w.s.get(w.req)
	if i := slices.Index(l.others, w); i >= 0 {
		l.others = slices.Delete(l.others, i, i+1)
		if i == 0 {
			l.wakeFirst() // the new first watches the expiry, or tries
		}
	}
}

// Cancel withdraws the waiter and leaves nothing behind; when it was the
// head of the fair queue, the next waiter is signalled so that it is not
// held up by a waiter that is gone (and may now fit).
func (w *waiter) Cancel(context.Context) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.queued {
		if w.counted {
			w.uncount()
			s.tidy(s.get(w.req))
		}
		return nil
	}
	w.queued = false
	l := s.get(w.req)
	if i := slices.Index(l.queue, w); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		if i == 0 {
			l.wakeFirst()
		}
	}
	s.tidy(l)
	return nil
}

// owned returns the hold h names if it is still held, and otherwise an
// ErrLeaseLost error: Renew and Release act only for the owner and token
// that hold. s.mu is held.
func (s *Store) owned(h dlock.Hold, now time.Time) (*hold, error) {
	l := s.locks[h.Name]
	if l != nil {
		s.prune(l, now)
		if hd := l.find(h.Owner); hd != nil {
			if hd.token != h.Token {
				return nil, fmt.Errorf("%w: %q holds it with token %d, not %d", dlock.ErrLeaseLost, hd.owner, hd.token, h.Token)
			}
			return hd, nil
		}
		s.tidy(l)
	}
	if l != nil && len(l.holders) == 1 {
		return nil, fmt.Errorf("%w: held by %q with token %d", dlock.ErrLeaseLost, l.holders[0].owner, l.holders[0].token)
	}
	return nil, fmt.Errorf("%w: token %d expired or released", dlock.ErrLeaseLost, h.Token)
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
	hd, err := s.owned(h, now)
	if err != nil {
		return err
	}
	s.expire(hd, now.Add(ttl))
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

// Release gives up one hold; at count zero it frees the hold's weight,
// which wakes the first waiter (see drop).
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	hd, err := s.owned(h, time.Now())
	if err != nil {
		return err
	}
	hd.count--
	if hd.count == 0 {
		s.drop(hd)
		s.tidy(hd.l)
	} else {
		s.changed(h.Name)
	}
	s.sweep(time.Now())
	return nil
}

// CanDetach says yes: a hold stays in the store (for the life of the
// process) until it expires.
func (b *Backend) CanDetach() bool { return true }

// Detach leaves a hold in the store to expire ttl from now.
func (b *Backend) Detach(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	return b.Renew(ctx, h, ttl)
}

// CanGrant says yes to every kind: the store is exact within the process.
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error { return nil }

// Downgrade lowers the weight of a hold in place (a writer becoming a
// reader) and wakes the first waiter, which may now fit.
func (b *Backend) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	return b.change(ctx, h, func(hd *hold) error {
		if weight < 1 || weight > hd.weight {
			return fmt.Errorf("holds %d, asks %d: %w", hd.weight, weight, dlock.ErrUpgrade)
		}
		hd.l.used -= hd.weight - weight
		hd.weight = weight
		hd.l.wakeFirst()
		return nil
	})
}

// Proclaim replaces the value of a hold and signals the name's watchers.
func (b *Backend) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	return b.change(ctx, h, func(hd *hold) error {
		hd.value = value
		return nil
	})
}

// change applies f to the hold h names, if it is still held, in one
// critical section, and signals the name's watchers when f succeeds.
func (b *Backend) change(ctx context.Context, h dlock.Hold, f func(*hold) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	hd, err := s.owned(h, time.Now())
	if err != nil {
		return err
	}
	if err := f(hd); err != nil {
		return err
	}
	s.changed(h.Name)
	return nil
}

// Watch subscribes to changes of name's holders: every grant, release,
// downgrade and new value signals it at once (an expiry is noticed by the
// Client when the holder's TTL runs out).
func (b *Backend) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.notices[name]
	if n == nil {
		n = &notice{ch: make(chan struct{})}
		s.notices[name] = n
	}
	n.subs++
	return &subscription{s: s, name: name, ch: n.ch}, nil
}

type subscription struct {
	s      *Store
	name   string
	ch     chan struct{} // the signal of the next change
	closed bool
}

func (w *subscription) Wait(ctx context.Context) error {
	select {
	case <-w.ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.s.mu.Lock()
	if n := w.s.notices[w.name]; n != nil {
		w.ch = n.ch
	}
	w.s.mu.Unlock()
	return nil
}

func (w *subscription) Close() error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if n := s.notices[w.name]; n != nil {
		if n.subs--; n.subs == 0 {
			delete(s.notices, w.name)
		}
	}
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

// Inspect lists the holders of the names that start with prefix, one
// LockInfo per holder.
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
		s.prune(l, now)
		for _, h := range l.holders {
			out = append(out, dlock.LockInfo{Name: name, Owner: h.owner, Token: h.token, Count: h.count,
				Kind: l.kind, Limit: l.limit, Weight: h.weight, Value: h.value,
				TTL: h.expires.Sub(now), Waiters: len(l.queue) + len(l.others)})
		}
		s.tidy(l)
	}
	slices.SortFunc(out, func(a, b dlock.LockInfo) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return out, nil
}
