package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is one granted hold of a lock. It is renewed in the background by
// its Client until Unlock, until it is lost, or until the Client is closed.
// A Lease is safe for concurrent use.
//
// A Lease is a promise with an end: [Lease.Deadline]. It is NOT safe to
// assume that the lock is still held after the deadline or once
// [Lease.Done] is closed; work under [Lease.Context] and give
// [Lease.Token] to the resource the lock protects so that it can reject a
// holder that lost the lock without knowing it.
type Lease struct {
	c          *Client
	name       string // as the caller gave it
	key        string // with the namespace
	owner      string
	token      uint64
	count      int
	handle     any
	maxHoldEnd time.Time // zero without MaxHold

	ctx    *leaseContext // points to lctx
	lctx   leaseContext
	cancel context.CancelFunc

	mu        sync.Mutex
	ttl       time.Duration
	deadline  time.Time
	nextRenew time.Time
	renewing  chan struct{} // non-nil while a renewal is in flight; closed when it ends
	final     bool          // MaxHold: the last renewal has been made
	lastErr   error         // the last renewal error since the last success
	err       error         // why the lease is over; nil while it is held
	unlocked  bool          // Unlock was called
	released  bool          // a release was sent (by Unlock, Close or MaxHold)
	relOnEnd  bool          // the keeper must release it (MaxHold)
}

func newLease(c *Client, m *Mutex, key, owner string, g Grant, sent time.Time) *Lease {
	l := &Lease{
		c: c, name: m.name, key: key, owner: owner,
		token: g.Token, count: g.Count, handle: g.Handle,
		ttl: m.cfg.ttl,
	}
	if m.cfg.maxHold > 0 {
		l.maxHoldEnd = sent.Add(m.cfg.maxHold)
	}
	inner, cancel := context.WithCancel(context.Background())
	l.lctx = leaseContext{l: l, inner: inner}
	l.ctx = &l.lctx
	l.cancel = cancel
	l.renewedLocked(sent, l.ttl)
	return l
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner id the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token of the grant. It is strictly greater than
// the token of every earlier grant of this lock name; a reentrant grant has
// the token of the outer one.
func (l *Lease) Token() uint64 { return l.token }

// Holds returns the reentry count on the backend right after this grant: 1
// for a new grant, more for a reentrant one.
func (l *Lease) Holds() int { return l.count }

// Deadline returns the end of the validity the client can promise: the send
// time of the last successful acquire or renewal plus TTL × (1 − drift),
// bounded by MaxHold. Each renewal moves it forward.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done returns a channel that is closed when the lease is over: lost,
// unlocked, or its Client closed.
func (l *Lease) Done() <-chan struct{} { return l.ctx.inner.Done() }

// Err returns nil while the lease is valid, and otherwise why it is over:
// an error matching [ErrLeaseLost] with the cause (the backend gave the lock
// away, the deadline passed without a successful renewal, MaxHold was
// reached, or also [ErrClosed]), or [ErrUnlocked] after Unlock. Err compares
// the clock with [Lease.Deadline] itself on every call, so after a pause
// past the deadline the very next call reports the loss.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && !l.c.cfg.clock.Now().Before(l.deadline) {
		l.expireLocked()
	}
	return l.err
}

// Context returns a context that is cancelled when the lease is over. Its
// Deadline is the lease's current [Lease.Deadline] (moving forward with
// renewals) and its Err is [Lease.Err]: it matches [ErrLeaseLost] as well as
// context.DeadlineExceeded (the validity ran out) or context.Canceled. It
// carries no values.
func (l *Lease) Context() context.Context { return l.ctx }

// Extend renews the lease now with a new TTL, which also becomes the TTL of
// later renewals. A TTL below [MinTTL] or above [Client.MaxTTL] is
// [ErrInvalidOption] and leaves the lease unchanged. It returns an error
// matching [ErrLeaseLost] if the backend says the lease was lost (the lease
// is then over), or the backend's error if it could not be reached (the
// lease is unchanged and renewal goes on). Extend returns at the latest
// [CancelGrace] after ctx ends, whatever the store does.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	fail := func(kind, err error) error {
		return &Error{Op: "extend", Name: l.name, Backend: c.desc, Kind: kind, Err: err}
	}
	if ttl < MinTTL {
		return fail(ErrInvalidOption, fmt.Errorf("TTL %v is below the minimum %v", ttl, MinTTL))
	}
	if err := c.checkTTL(ttl); err != nil {
		return fail(ErrInvalidOption, err)
	}
	limit, leave, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer leave()
	l.mu.Lock()
	if err := l.awaitRenewalLocked(ctx, true); err != nil {
		l.mu.Unlock()
		return fail(kindOf(err), err)
	}
	if l.err == nil && !c.cfg.clock.Now().Before(l.deadline) {
		l.expireLocked()
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	sent := c.cfg.clock.Now()
	eff, final := l.renewTTLLocked(sent, ttl)
	ch := make(chan struct{})
	l.renewing = ch
	l.mu.Unlock()

	// A renewal answered late is harmless: the lease's deadline counts
	// from before it was sent.
	err = renewBounded(c, limit, ctx, l.hold(), eff)

	l.mu.Lock()
	l.renewing = nil
	close(ch)
	if err == nil && l.err == nil {
		l.ttl = ttl
		l.final = final
		l.renewedLocked(sent, eff)
	} else if errors.Is(err, ErrLeaseLost) {
		l.endLocked(ErrLeaseLost, err, false, false)
	}
	l.mu.Unlock()
	c.keeper.wake()
	if err != nil {
		return fail(kindOf(err), err)
	}
	return nil
}

// Unlock releases the hold on the backend (for a reentrant hold: one level
// of it) and ends the lease. It returns an error matching [ErrLeaseLost] if
// the lease had been lost before — the release then does not touch a new
// holder — [ErrUnlocked] if it was already unlocked, and [ErrClosed] if the
// Client was closed (which released it). If the backend cannot be reached
// the error says so; the lease is over either way and, no longer renewed,
// expires on the backend after its TTL. Unlock returns at the latest
// [CancelGrace] after ctx ends, whatever the store does.
func (l *Lease) Unlock(ctx context.Context) error {
	c := l.c
	fail := func(kind, err error) error {
		return &Error{Op: "unlock", Name: l.name, Backend: c.desc, Kind: kind, Err: err}
	}
	l.mu.Lock()
	if l.unlocked {
		l.mu.Unlock()
		return fail(ErrUnlocked, nil)
	}
	l.unlocked = true
	l.mu.Unlock()
	limit, leave, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer leave()

	l.mu.Lock()
	// Wait for a renewal in flight, which may report the lease lost, but
	// not past ctx: a release may run beside a renewal.
	_ = l.awaitRenewalLocked(ctx, false)
	if l.err == nil && !c.cfg.clock.Now().Before(l.deadline) {
		l.expireLocked()
	}
	stale := l.err
	release := !l.released
	l.released = true
	l.endLocked(ErrUnlocked, nil, false, false)
	l.mu.Unlock()
	c.keeper.remove(l)

	if release { // err is nil here
		err = releaseBounded(c, limit, ctx, l.hold())
	}
	switch {
	case stale != nil && errors.Is(stale, ErrClosed):
		return fail(ErrClosed, nil)
	case stale != nil:
		return stale.(*lostError).err.withOp("unlock")
	case err != nil:
		return fail(kindOf(err), err)
	}
	return nil
}

// awaitRenewalLocked waits while a renewal is in flight (l.mu held, and
// let go while waiting), until it ends, or with lostEnds until the lease
// has an error; it returns ctx's error if ctx ends first.
func (l *Lease) awaitRenewalLocked(ctx context.Context, lostEnds bool) error {
	for l.renewing != nil && (!lostEnds || l.err == nil) {
		if err := ctx.Err(); err != nil {
			return err
		}
		ch := l.renewing
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		l.mu.Lock()
	}
	return nil
}

func (l *Lease) hold() Hold {
	return Hold{Name: l.key, Owner: l.owner, Token: l.token, Handle: l.handle}
}

// renewTTLLocked returns the TTL to renew with at now, given the lease's
// TTL, and whether this is the last renewal before MaxHold.
func (l *Lease) renewTTLLocked(now time.Time, ttl time.Duration) (time.Duration, bool) {
	if l.maxHoldEnd.IsZero() {
		return ttl, false
	}
	left := l.maxHoldEnd.Sub(now)
	if left <= ttl {
		return max(left, time.Millisecond), true
	}
	return ttl, false
}

// renewedLocked records a successful acquire or renewal sent at sent with
// TTL ttl.
func (l *Lease) renewedLocked(sent time.Time, ttl time.Duration) {
	dl := sent.Add(time.Duration(float64(ttl) * (1 - l.c.cfg.drift)))
	if !l.maxHoldEnd.IsZero() && dl.After(l.maxHoldEnd) {
		dl = l.maxHoldEnd
	}
	l.deadline = dl
	l.nextRenew = sent.Add(l.ttl / 3)
	l.lastErr = nil
}

// expireLocked ends a lease whose deadline has passed.
func (l *Lease) expireLocked() {
	var cause error
	switch {
	case l.final || (!l.maxHoldEnd.IsZero() && !l.deadline.Before(l.maxHoldEnd)):
		cause = fmt.Errorf("MaxHold reached")
		l.relOnEnd = true
	case l.lastErr != nil:
		cause = fmt.Errorf("validity deadline passed without a successful renewal: %w", l.lastErr)
	default:
		cause = errors.New("validity deadline passed without a successful renewal")
	}
	l.endLocked(ErrLeaseLost, cause, true, true)
}

// endLocked ends the lease if it is not over yet, with kind and cause;
// expired says the validity deadline passed. It reports whether it ended
// it.
func (l *Lease) endLocked(kind, cause error, expired, log bool) bool {
	if l.err != nil {
		return false
	}
	// One allocation for both: every Lock ends with one of these.
	le := &struct {
		lostError
		e Error
	}{e: Error{Op: "lease", Name: l.name, Backend: l.c.desc, Kind: kind, Err: cause}}
	le.lostError = lostError{err: &le.e, deadline: expired}
	l.err = &le.lostError
	l.cancel()
	if log {
		l.c.cfg.logger.Warn("dlock: lease lost", "lock", l.name, "backend", l.c.desc, "token", l.token, "cause", cause)
	}
	return true
}

// endHold ends the lease for Close or loss; it reports whether the caller
// must release it on the backend.
func (l *Lease) endHold(err *Error, expired bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(err.Kind, err.Err, expired, false)
	if l.released {
		return false
	}
	l.released = true
	return true
}

func (e *Error) withOp(op string) *Error {
	c := *e
	c.Op = op
	return &c
}

// leaseContext is the context of a lease: Done when the lease is over, Err
// judged by the lease on every call.
type leaseContext struct {
	l     *Lease
	inner context.Context
}

func (c *leaseContext) Deadline() (time.Time, bool) { return c.l.Deadline(), true }
func (c *leaseContext) Done() <-chan struct{}       { return c.inner.Done() }
func (c *leaseContext) Value(key any) any           { return nil }

func (c *leaseContext) Err() error {
	if err := c.l.Err(); err != nil {
		return err
	}
	return nil
}

// AfterFunc lets context.WithCancel and friends propagate cancellation from
// a lease's context without a goroutine each.
func (c *leaseContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.inner, f) }

func (c *leaseContext) String() string { return "dlock.Lease(" + c.l.name + ").Context" }
