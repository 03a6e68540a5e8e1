package dlock

import "context"

// Semaphore is a named counting lock of a Client: at most its limit of
// weight is held at once, as judged by the store, across every process
// that uses the name. Each Acquire returns a Lease of its own for one
// permit (of the Semaphore's [Weight], 1 by default), renewed, lost and
// released like a Mutex's.
//
// The store records the limit with the name's first grant and keeps it
// while the name has holders or waiters: a Semaphore of another limit, or
// a Mutex or RWMutex of the same name, is refused with an error matching
// [ErrInvalidOption] (a [*ConflictError] naming both) instead of mixing
// counts, as Curator's semaphores silently do.
//
// # Queueing
//
// Waiters are granted in arrival order (golang.org/x/sync's rule): a
// request that would fit is not granted ahead of an earlier waiter, so a
// heavy request is never starved by a stream of light ones. A waiter that
// gives up leaves the queue at once.
//
// # Fencing
//
// Every grant's token is above every earlier grant's of the name, so a
// resource can still reject a permit older than one it has seen: a permit
// lost in a pause cannot write after a later permit did. What a single
// token cannot do is tell two valid permits apart — up to the limit of
// them may legally write at once — so a resource that must not see two
// writers at once needs a Mutex, not a Semaphore.
type Semaphore struct {
	spec
}

// Semaphore returns the semaphore called name with the given limit (1 to
// [MaxLimit]). No request is made until Acquire or TryAcquire; an invalid
// name, limit or option is reported by them, as is a backend that cannot
// keep a semaphore (see [Granter]).
func (c *Client) Semaphore(name string, limit int, opts ...Option) *Semaphore {
	s := &Semaphore{spec{c: c, name: name, cfg: c.cfg, kind: KindSemaphore, limit: limit}}
	s.cfg.clientOnly, s.cfg.mutexOnly, s.cfg.errs = nil, nil, nil
	s.cfg.applyAll(opts)
	s.weight = max(s.cfg.weight, 1)
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the semaphore's limit.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes a permit, waiting in arrival order until the weight held
// leaves room for it or ctx is done; it behaves as [Mutex.Lock] otherwise
// (woken, not polling; nothing left behind when ctx ends; re-entry only
// by an explicit [Owner] or [WithLease]).
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	return s.acquire(ctx, "acquire", true, "")
}

// TryAcquire takes a permit if there is room and nobody waits before it,
// and otherwise returns at once with an error matching [ErrNotAcquired]
// (a [*HeldError] says how much is held).
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	return s.acquire(ctx, "tryacquire", false, "")
}
