package dlock

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	// Most of a Client's memory is its leases, so a Lease keeps what it
	// needs in few bytes: its name is decoded from key, its times are
	// instants, and its context is made only when asked for.
	c      *Client
	key    string // the name as the backend knows it: with the namespace
	owner  string
	token  uint64
	handle any
	count  int32
	slot   int32 // index in the keeper's leases, -1 when not kept; guarded by keeper.mu
	kind   Kind
	limit  int32
	weight int32 // guarded by mu after a Downgrade

	mu         sync.Mutex
	ttl        time.Duration
	deadline   instant
	nextRenew  instant
	maxHoldEnd instant       // never without MaxHold
	renewing   chan struct{} // non-nil while a renewal is in flight; closed when it ends
	done       *leaseDone    // made by the first use of Done or of Context's AfterFunc
	lastErr    error         // the last renewal error since the last success
	err        error         // why the lease is over; nil while it is held
	final      bool          // MaxHold: the last renewal has been made
	unlocked   bool          // Unlock was called
	released   bool          // a release was sent (by Unlock, Close or MaxHold)
	traceEnd   bool          // the tracer is yet to be told of the end (see unlock)
	endCause   EndCause      // why the lease ended; 0 while held
	granted    instant       // when the granting request was sent
	minHoldEnd instant       // MinHold: the hold stays in the store until then; 0 without
	relOnEnd   bool          // the keeper must release it (MaxHold)
}

// leaseDone is what Done and Context's cancellation need: a context that
// is cancelled when the lease ends.
type leaseDone struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newLease(c *Client, m *spec, key, owner string, g Grant, sent time.Time) *Lease {
	l := &Lease{
		c: c, key: key, owner: owner,
		token: g.Token, count: int32(min(g.Count, math.MaxInt32)), handle: g.Handle,
		slot: -1, ttl: m.cfg.ttl, maxHoldEnd: never,
		kind: m.kind, limit: int32(m.limit), weight: int32(m.weight),
	}
	if m.cfg.maxHold > 0 {
		l.maxHoldEnd = c.instant(sent.Add(m.cfg.maxHold))
	}
	l.granted = c.instant(sent)
	if m.cfg.minHold > 0 && l.count == 1 {
		l.minHoldEnd = l.granted + instant(m.cfg.minHold)
	}
	l.renewedLocked(l.granted, l.ttl)
	return l
}

// Name returns the lock's name.
func (l *Lease) Name() string {
	_, name, _ := decodeKey(l.key)
	return name
}

// Owner returns the owner id the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token of the grant. It is strictly greater than
// the token of every earlier grant of this lock name; a reentrant grant has
// the token of the outer one.
func (l *Lease) Token() uint64 { return l.token }

// Holds returns the reentry count on the backend right after this grant: 1
// for a new grant, more for a reentrant one.
func (l *Lease) Holds() int { return int(l.count) }

// Deadline returns the end of the validity the client can promise: the send
// time of the last successful acquire or renewal plus TTL × (1 − drift),
// bounded by MaxHold. Each renewal moves it forward. A renewal whose answer
// is not known counts as applied: before one with a TTL that would end
// the hold sooner (Extend to a shorter TTL, the last renewal before
// MaxHold) is sent, the deadline is lowered to what it would set, and
// only an answer raises it again. So the deadline never exceeds what any
// request in flight could have set on the store.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.unlock()
	return l.c.time(l.deadline)
}

// Done returns a channel that is closed when the lease is over: lost,
// unlocked, or its Client closed.
func (l *Lease) Done() <-chan struct{} { return l.doneCtx().Done() }

// doneCtx returns the context that is cancelled when the lease ends,
// making it on first use: most leases are never asked.
func (l *Lease) doneCtx() context.Context {
	l.mu.Lock()
	defer l.unlock()
	if l.done == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.done = &leaseDone{ctx: ctx, cancel: cancel}
		if l.err != nil {
			cancel()
		}
	}
	return l.done.ctx
}

// Err returns nil while the lease is valid, and otherwise why it is over:
// an error matching [ErrLeaseLost] with the cause (the backend gave the lock
// away, the deadline passed without a successful renewal, MaxHold was
// reached, or also [ErrClosed]), or [ErrUnlocked] after Unlock. Err compares
// the clock with [Lease.Deadline] itself on every call, so after a pause
// past the deadline the very next call reports the loss.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.unlock()
	if l.err == nil && l.c.now() >= l.deadline {
		l.expireLocked()
	}
	return l.errLocked()
}

// Context returns a context that is cancelled when the lease is over. Its
// Err is [Lease.Err]: it matches [ErrLeaseLost] as well as
// context.DeadlineExceeded (the validity ran out) or context.Canceled. It
// carries no values.
//
// Its Deadline keeps context.Context's contract and never moves: it is the
// MaxHold end for a lease with [MaxHold], and none otherwise. The moving
// validity is [Lease.Deadline], which a context could not report: a
// context.WithTimeout(lease.Context(), d) whose d lies past the current
// validity would never arm its timer, as the renewals go on.
func (l *Lease) Context() context.Context { return (*leaseContext)(l) }

// Extend renews the lease now with a new TTL, which also becomes the TTL of
// later renewals. A TTL below [MinTTL] or above [Client.MaxTTL] is
// [ErrInvalidOption] and leaves the lease unchanged. It returns an error
// matching [ErrLeaseLost] if the backend says the lease was lost (the lease
// is then over), or the backend's error if it could not be reached (the
// lease is unchanged and renewal goes on, except that a TTL shorter than
// the current validity has already lowered [Lease.Deadline]: the store may
// have applied it). Extend returns at the latest [CancelGrace] after ctx
// ends, whatever the store does.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	fail := func(kind, err error) error {
		return &Error{Op: "extend", Name: l.Name(), Backend: c.desc, Kind: kind, Err: err}
	}
	if ttl < MinTTL {
		return fail(ErrInvalidOption, fmt.Errorf("TTL %v is below the minimum %v", ttl, MinTTL))
	}
	if err := c.checkTTL(ttl); err != nil {
		return fail(ErrInvalidOption, err)
	}
	limit, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer c.leave(limit)
	l.mu.Lock()
	if err := l.awaitRenewalLocked(ctx, true); err != nil {
		l.unlock()
		return fail(kindOf(err), err)
	}
	if l.err == nil && c.now() >= l.deadline {
		l.expireLocked()
	}
	if l.err != nil {
		err := l.errLocked()
		l.unlock()
		return err
	}
	sent := c.now()
	eff, final := l.renewTTLLocked(sent, ttl)
	lowered := l.capLocked(sent, eff)
	ch := make(chan struct{})
	l.renewing = ch
	l.unlock()
	if lowered {
		c.keeper.wake() // to end the lease by its new deadline, and renew before
	}

	// A renewal answered late is harmless: the lease's deadline counts
	// from before it was sent.
	err = renewBounded(c, limit, ctx, l.hold(), eff)
	l.traceRenew(sent, c.now(), err)

	l.mu.Lock()
	l.renewing = nil
	close(ch)
	if err == nil && l.err == nil {
		l.ttl = ttl
		l.final = final
		l.renewedLocked(sent, eff)
	} else if errors.Is(err, ErrLeaseLost) {
		l.endLocked(ErrLeaseLost, err, EndRenewalRefused, false, false)
	} // else the outcome is not known: the deadline stays as capLocked left it

	l.unlock()
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
		return &Error{Op: "unlock", Name: l.Name(), Backend: c.desc, Kind: kind, Err: err}
	}
	l.mu.Lock()
	if l.unlocked {
		l.unlock()
		return fail(ErrUnlocked, nil)
	}
	l.unlocked = true
	l.unlock()
	limit, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer c.leave(limit)

	l.mu.Lock()
	// Wait for a renewal in flight, which may report the lease lost, but
	// not past ctx: a release may run beside a renewal.
	_ = l.awaitRenewalLocked(ctx, false)
	if l.err == nil && c.now() >= l.deadline {
		l.expireLocked()
	}
	stale := l.errLocked()
	release := !l.released
	l.released = true
	l.endLocked(ErrUnlocked, nil, EndUnlocked, false, false)
	l.unlock()
	c.keeper.remove(l)

	if release { // err is nil here
		err = l.release(limit, ctx, stale == nil)
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
		l.unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		l.mu.Lock()
	}
	return nil
}

func (l *Lease) hold() Hold {
	return Hold{Name: l.key, Owner: l.owner, Token: l.token, Handle: l.handle, Kind: l.kind}
}

// renewTTLLocked returns the TTL to renew with at now, given the lease's
// TTL, and whether this is the last renewal before MaxHold.
func (l *Lease) renewTTLLocked(now instant, ttl time.Duration) (time.Duration, bool) {
	if l.maxHoldEnd == never {
		return ttl, false
	}
	left := time.Duration(l.maxHoldEnd - now)
	if left <= ttl {
		return max(left, time.Millisecond), true
	}
	return ttl, false
}

// capLocked is called before a renewal with TTL ttl is sent at sent: if
// the store, applying it, would end the hold before the lease's deadline,
// it lowers the deadline to what the renewal would set (the answer may
// never come, and the store may have applied it all the same), and
// brings the next renewal forward to within the new validity. It reports
// whether it lowered the deadline.
func (l *Lease) capLocked(sent instant, ttl time.Duration) bool {
	d := sent + instant(float64(ttl)*(1-l.c.cfg.drift))
	if d >= l.deadline {
		return false
	}
	l.deadline = d
	l.nextRenew = min(l.nextRenew, sent+instant(ttl/3))
	return true
}

// renewedLocked records a successful acquire or renewal sent at sent with
// TTL ttl.
func (l *Lease) renewedLocked(sent instant, ttl time.Duration) {
	l.deadline = min(sent+instant(float64(ttl)*(1-l.c.cfg.drift)), l.maxHoldEnd)
	l.nextRenew = sent + instant(l.ttl/3)
	l.lastErr = nil
}

// expireLocked ends a lease whose deadline has passed.
func (l *Lease) expireLocked() {
	var cause error
	why := EndDeadlinePassed
	switch {
	case l.final || l.deadline >= l.maxHoldEnd:
		cause = fmt.Errorf("MaxHold reached")
		why = EndMaxHold
		l.relOnEnd = true
	case l.lastErr != nil:
		cause = fmt.Errorf("validity deadline passed without a successful renewal: %w", l.lastErr)
	default:
		cause = errors.New("validity deadline passed without a successful renewal")
	}
	l.endLocked(ErrLeaseLost, cause, why, true, true)
}

// endLocked ends the lease if it is not over yet, with kind and cause;
// expired says the validity deadline passed. It reports whether it ended
// it.
func (l *Lease) endLocked(kind, cause error, why EndCause, expired, log bool) bool {
	if l.err != nil {
		return false
	}
	l.endCause = why
	l.traceEnd = l.c.cfg.tracer != nil
	if kind == ErrUnlocked && cause == nil {
		l.err = unlockedMark // most leases end so, and nobody asks why
	} else {
		l.err = l.newErr(kind, cause, expired)
	}
	if l.done != nil {
		l.done.cancel()
	}
	if log {
		l.c.cfg.logger.Warn("dlock: lease lost", "lock", l.Name(), "backend", l.c.desc, "token", l.token, "cause", cause)
	}
	return true
}

// unlockedMark is the err of a lease ended by Unlock until its error is
// asked for (see errLocked); it is never returned.
var unlockedMark = &lostError{}

// errLocked returns why the lease is over (nil while it is held), making
// the error of an Unlock on first use.
func (l *Lease) errLocked() error {
	if l.err == error(unlockedMark) {
		l.err = l.newErr(ErrUnlocked, nil, false)
	}
	return l.err
}

// newErr returns the error of a lease that is over (see lostError).
func (l *Lease) newErr(kind, cause error, expired bool) *lostError {
	// One allocation for both.
	le := &struct {
		lostError
		e Error
	}{e: Error{Op: "lease", Name: l.Name(), Backend: l.c.desc, Kind: kind, Err: cause}}
	le.lostError = lostError{err: &le.e, deadline: expired}
	return &le.lostError
}

// endHold ends the lease for Close or loss; it reports whether the caller
// must release it on the backend.
func (l *Lease) endHold(err *Error, why EndCause, expired bool) bool {
	l.mu.Lock()
	defer l.unlock()
	l.endLocked(err.Kind, err.Err, why, expired, false)
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
// judged by the lease on every call. It is the Lease itself, so that
// Context allocates nothing.
type leaseContext Lease

func (c *leaseContext) l() *Lease             { return (*Lease)(c) }
func (c *leaseContext) Done() <-chan struct{} { return c.l().Done() }
func (c *leaseContext) Value(key any) any     { return nil }

// Deadline is the MaxHold end, set once at the grant, or none: a
// context's Deadline must not move (see Lease.Context).
func (c *leaseContext) Deadline() (time.Time, bool) {
	if l := c.l(); l.maxHoldEnd != never {
		return l.c.time(l.maxHoldEnd), true
	}
	return time.Time{}, false
}

func (c *leaseContext) Err() error {
	if err := c.l().Err(); err != nil {
		return err
	}
	return nil
}

// AfterFunc lets context.WithCancel and friends propagate cancellation from
// a lease's context without a goroutine each.
func (c *leaseContext) AfterFunc(f func()) func() bool {
	return context.AfterFunc(c.l().doneCtx(), f)
}

func (c *leaseContext) String() string { return "dlock.Lease(" + c.l().Name() + ").Context" }

// instant is a moment on a Client's clock: nanoseconds since the Client's
// epoch (8 bytes, where a time.Time takes 24). Differences of instants are
// those of the clock's times, monotonic readings included.
type instant int64

// never is the instant after every other.
const never = instant(math.MaxInt64)

// now returns the clock's current instant.
func (c *Client) now() instant { return c.instant(c.cfg.clock.Now()) }

// instant returns t as an instant of c.
func (c *Client) instant(t time.Time) instant { return instant(t.Sub(c.epoch)) }

// time returns the time of instant i.
func (c *Client) time(i instant) time.Time { return c.epoch.Add(time.Duration(i)) }

// release gives the hold up on the backend — or, under MinHold before its
// end, leaves it in the store to expire there at the MinHold end (a
// renewal for what is left, judged by the store's clock), so that the name
// stays taken with no process left running.
func (l *Lease) release(limit *graceLimit, ctx context.Context, valid bool) error {
	c := l.c
	if valid && l.minHoldEnd != 0 {
		if left := time.Duration(l.minHoldEnd - c.now()); left > 0 {
			if d, ok := c.b.(Detacher); ok {
				h := l.hold()
				return bounded0(c, limit, ctx, func(ctx context.Context) error { return d.Detach(ctx, h, left) }, nil)
			}
		}
	}
	return releaseBounded(c, limit, ctx, l.hold())
}
