package dlock

import (
	"context"
	"errors"
	"fmt"
)

// RWMutex is a named read-write lock of a Client: readers share it, a
// writer excludes everyone. A reader weighs 1 and a writer [RWLimit] out
// of a limit of RWLimit, so the rule of every weighted grant applies:
// requests are granted in arrival order, and a waiting writer holds back
// every reader that asks after it — writers are never starved by a stream
// of readers (unlike Redisson's RReadWriteLock).
//
// # Re-entry
//
// Only by explicit identity, as for the Mutex ([Owner] or [WithLease]):
// the owner of a write lease may take it again for writing or for reading
// (reading while writing), and the owner of a read lease again for
// reading. A reader asking to write is refused at once with an error
// matching [ErrUpgrade] — two readers waiting for each other would
// deadlock — so unlock and Lock instead. A writer becomes a reader in
// place with [Lease.Downgrade], without letting another writer in.
//
// # Fencing
//
// Tokens come from the name's one counter: a writer's token is above every
// grant's (read or write) before it, so a resource that checks the token
// rejects a write from a writer or reader that lost the lock to a later
// writer.
type RWMutex struct {
	r, w spec
}

// RWMutex returns the read-write lock called name. No request is made
// until a lock call; an invalid name or option is reported by it, as is a
// backend that cannot keep a read-write lock (see [Granter]).
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	rw := &RWMutex{r: spec{c: c, name: name, cfg: c.cfg, kind: KindRWMutex, limit: RWLimit, weight: 1}}
	rw.r.cfg.clientOnly, rw.r.cfg.mutexOnly, rw.r.cfg.errs = nil, nil, nil
	rw.r.cfg.applyAll(opts)
	if rw.r.cfg.weight != 0 {
		rw.r.cfg.errs.Check(false, "Weight is a Semaphore option: a reader weighs 1 and a writer all")
	}
	rw.w = rw.r
	rw.w.weight = RWLimit
	return rw
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.r.name }

// RLock takes a read lease, waiting as [Mutex.Lock] does: behind every
// earlier waiter, writers included.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.r.acquire(ctx, "rlock", true, "")
}

// TryRLock takes a read lease if no writer holds the lock or waits for it,
// and otherwise returns at once with an error matching [ErrNotAcquired].
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.r.acquire(ctx, "tryrlock", false, "")
}

// Lock takes the write lease, waiting until every reader and writer before
// it is gone.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.w.acquire(ctx, "lock", true, "")
}

// TryLock takes the write lease if nobody holds the lock or waits for it,
// and otherwise returns at once with an error matching [ErrNotAcquired].
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.w.acquire(ctx, "trylock", false, "")
}

// Downgrade turns a write lease of an [RWMutex] into a read lease in place:
// the hold is never released, so no other writer can come in between, and
// readers waiting behind it are woken. The token is unchanged. It returns
// an error matching [ErrInvalidOption] for a lease that is not a write
// lease or a backend that cannot do it (see [Downgrader]), and
// [ErrLeaseLost] if the lease is over.
func (l *Lease) Downgrade(ctx context.Context) error {
	c := l.c
	fail := func(kind, err error) error {
		return &Error{Op: "downgrade", Name: l.Name(), Backend: c.desc, Kind: kind, Err: err}
	}
	if l.kind != KindRWMutex || l.Weight() != RWLimit {
		return fail(ErrInvalidOption, fmt.Errorf("a %s lease of weight %d is not a write lease", l.kind, l.Weight()))
	}
	d, ok := c.b.(Downgrader)
	if !ok {
		return fail(ErrInvalidOption, fmt.Errorf("%w: the backend cannot downgrade a hold in place", errors.ErrUnsupported))
	}
	if err := l.Err(); err != nil {
		return err
	}
	limit, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer c.leave(limit)
	h := l.hold()
	err = bounded0(c, limit, ctx, func(ctx context.Context) error { return d.Downgrade(ctx, h, 1) }, nil)
	if errors.Is(err, errors.ErrUnsupported) {
		return fail(ErrInvalidOption, err)
	}
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			l.mu.Lock()
			l.endLocked(ErrLeaseLost, err, EndRenewalRefused, false, true)
			l.unlock()
		}
		return fail(kindOf(err), err)
	}
	l.mu.Lock()
	l.weight = 1
	l.mu.Unlock()
	return nil
}

// Kind returns what the lease's name is used as.
func (l *Lease) Kind() Kind { return l.kind }

// Weight returns what the lease holds of its name's limit: 1 for a mutex
// and a reader, the semaphore's weight, [RWLimit] for a writer.
func (l *Lease) Weight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.weight)
}
