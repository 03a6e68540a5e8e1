package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
)

// Mutex is a named distributed lock of a Client. It holds no state of its
// own beyond its options: every Lock or TryLock is a separate acquisition
// that returns its own Lease. A Mutex is safe for concurrent use; two
// goroutines that lock the same Mutex exclude each other unless they share
// an explicit Owner or pass a lease with WithLease.
type Mutex struct {
	c    *Client
	name string
	cfg  config
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Lock acquires the lock, waiting until it is granted or ctx is done. While
// waiting it is woken by the backend when the lock is released (or when the
// holder's lease runs out) rather than polling.
//
// If ctx carries a lease of the same lock (see [WithLease]) or the Mutex
// has an explicit [Owner] that holds it, Lock re-enters: it returns at once
// with the holder's token, and the lock frees after as many Unlocks.
//
// If ctx ends first, Lock returns an error matching both [ErrNotAcquired]
// and ctx.Err(), and leaves nothing behind: its place in any queue is
// withdrawn, so nobody after it is delayed. It returns at the latest
// [CancelGrace] after ctx ends, even if the store stopped answering (the
// error then also matches [ErrBackendUnavailable]). A grant that reached
// the store but whose answer was cut off is released in the background
// once the store answers again (for an owner made for this Lock, on a
// backend that implements [Inspector]); otherwise it expires with its TTL.
//
// Lock never returns a lease that is already over: a grant whose answer
// arrives after the validity the client can promise (the store stalled
// longer than the TTL, as in a failover) is renewed first, and if it was
// lost meanwhile Lock waits again (TryLock reports [ErrNotAcquired]).
//
// If the backend cannot be reached on the first attempt, Lock returns an
// error matching [ErrBackendUnavailable] at once. A store that hangs
// without closing the connection fails the attempt the same way once the
// backend's request timeout has passed, even under a ctx without a
// deadline: Redis's client read timeout, about 10 s on etcd and ZooKeeper
// (see their package docs). Once it is waiting, it
// rides out such errors (a server restart, an election), trying again with
// a backoff of up to a second until it is granted or ctx ends.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, "lock", true)
}

// TryLock acquires the lock if it is free (or re-enters it, as Lock does)
// and otherwise returns at once with an error matching [ErrNotAcquired];
// errors.As with a [*HeldError] tells who holds it when the backend knows.
// It never waits for the lock, only for the backend's answer, and that at
// most for the backend's request timeout (see Lock).
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquire(ctx, "trylock", false)
}

func (m *Mutex) acquire(ctx context.Context, op string, wait bool) (*Lease, error) {
	c := m.c
	fail := func(kind, err error) (*Lease, error) {
		return nil, &Error{Op: op, Name: m.name, Backend: c.desc, Kind: kind, Err: err}
	}
	if kind, err := m.check(ctx); err != nil {
		return fail(kind, err)
	}
	key := encodeKey(c.cfg.namespace, m.name)
	owner, err := m.owner(ctx, key)
	if err != nil {
		return fail(ErrLeaseLost, err)
	}
	fresh := owner == "" // only this acquisition can hold with its owner
	if fresh {
		owner = newOwner()
	}
	// Every backend call below returns by CancelGrace after the caller's
	// ctx ends; a call that does not is left to finish in the background,
	// which then undoes it (see late). Under a ctx that never ends the
	// calls run on this goroutine, at no cost: only Close could end them,
	// and Close bounds its own wait.
	limit, err := c.enter(ctx)
	if err != nil {
		return fail(ErrClosed, nil)
	}
	defer c.leave(limit)
	// Close cancels waiting acquisitions.
	if ctx.Done() == nil {
		ctx = &closingContext{Context: ctx, c: c}
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(c.closing, cancel)
		defer stop()
	}

	q := acquisition{m: m, a: calls{c: c, limit: limit, ctx: ctx, name: m.name, key: key, owner: owner, fresh: fresh}}
	req := Request{Name: key, Owner: owner, TTL: m.cfg.ttl, Fair: m.cfg.fair, Wait: wait}
	g, err := q.run(req)
	for lost := 0; err == nil; lost++ {
		late := q.freshen(g)
		switch {
		case late == nil:
		case wait && errors.Is(late, ErrLeaseLost) && lost < lateRenewals:
			g, err = q.run(req) // granted too late and lost since: wait again
			continue
		case wait && errors.Is(late, ErrLeaseLost):
			return fail(ErrBackendUnavailable, fmt.Errorf("%w: %d grants in a row arrived after the TTL; the TTL is too short for this store", ErrBackendUnavailable, lost+1))
		case errors.Is(late, ErrLeaseLost):
			return fail(ErrNotAcquired, late)
		default:
			return fail(kindOf(late), late)
		}
		break
	}
	if err != nil {
		return fail(q.abandon(err))
	}
	l := newLease(c, m, key, owner, g, q.sent)
	c.keeper.add(l)
	return l, nil
}

// closingContext is a context that never ends (the Context it embeds,
// which gives its values) made to end when the Client closes: a Lock
// under context.Background and the like gets Close's cancellation from
// one small allocation, without a cancelCtx of its own nor a
// registration with the Client's.
type closingContext struct {
	context.Context
	c *Client
}

func (x *closingContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x *closingContext) Done() <-chan struct{}       { return x.c.closing.Done() }
func (x *closingContext) Err() error                  { return x.c.closing.Err() }

// AfterFunc lets contexts derived from x (a backend's WithTimeout) be
// cancelled with the Client's without a goroutine each.
func (x *closingContext) AfterFunc(f func()) func() bool {
	return context.AfterFunc(x.c.closing, f)
}

// check refuses, before any backend call, a bad name or option, a TTL
// above the backend's limit and a ctx that has already ended; it returns
// the error's kind with the error.
func (m *Mutex) check(ctx context.Context) (kind, err error) {
	if msg := validName(m.name, MaxNameLen); msg != "" {
		return ErrInvalidName, fmt.Errorf("name %s", msg)
	}
	if err := m.cfg.check(false); err != nil {
		return ErrInvalidOption, err
	}
	if err := m.c.checkTTL(m.cfg.ttl); err != nil {
		return ErrInvalidOption, err
	}
	if err := ctx.Err(); err != nil {
		return ErrNotAcquired, err
	}
	return nil, nil
}

// owner returns the owner to acquire key with: that of a lease of the same
// lock carried by ctx (which then re-enters), else the Mutex's explicit
// Owner, else "" for a fresh one. An outer lease that is over is an error.
func (m *Mutex) owner(ctx context.Context, key string) (string, error) {
	if outer := LeaseFrom(ctx); outer != nil && outer.c.b == m.c.b && outer.key == key {
		if err := outer.Err(); err != nil {
			return "", fmt.Errorf("the outer lease in the context is over: %w", err)
		}
		return outer.owner, nil
	}
	return m.cfg.owner, nil
}

// An acquisition is one Lock or TryLock after its checks: the first
// attempt, then for Lock the wait-and-attempt loop over the backend's
// Waiter, and on failure the undoing of what it may have left behind.
type acquisition struct {
	m        *Mutex
	a        calls
	w        Waiter
	sent     time.Time     // when the granting request was sent, less the grant's Age
	busy     bool          // a call of w was left running: it withdraws w when it ends
	cut      bool          // the last attempt's outcome is unknown
	seen     Holder        // the holder OnWait was last told of
	lastBusy error         // the last "held by" answer, for the error if ctx ends
	down     error         // the store's unavailability since its last answer, if any
	backoff  time.Duration // the pause after the store was last unreachable
}

// run makes the first attempt and, while the backend gave a Waiter, waits
// and attempts again until granted or an error ends the acquisition.
func (q *acquisition) run(req Request) (Grant, error) {
	q.sent = q.m.c.cfg.clock.Now()
	g, w, err := q.a.acquire(req)
	q.w = w
	q.cut = q.a.cut(err)
	if err == nil && g.Age > 0 {
		q.sent = q.sent.Add(-g.Age)
	}
	for q.w != nil && err != nil {
		switch {
		case errors.Is(err, ErrNotAcquired):
			q.down = nil
			err = q.waitRelease(err)
		case errors.Is(err, ErrBackendUnavailable) && q.a.ctx.Err() == nil:
			q.down = err
			err = q.pause(err)
		default:
			return g, err
		}
		if err != nil {
			q.busy = isNoAnswer(err)
			continue // the switch judges the error of Wait or of the pause
		}
		g, err = q.attempt()
	}
	return g, err
}

// waitRelease tells OnWait of a new holder named by refusal (an
// ErrNotAcquired answer) and waits for the backend's wake-up.
func (q *acquisition) waitRelease(refusal error) error {
	q.backoff = 0
	q.lastBusy = refusal
	if onWait := q.m.cfg.onWait; onWait != nil {
		var held *HeldError
		if errors.As(refusal, &held) && (held.Holder.Owner != q.seen.Owner || held.Holder.Token != q.seen.Token) {
			q.seen = held.Holder
			onWait(held.Holder)
		}
	}
	return q.a.wait(q.w)
}

// pause rides out a store that is briefly unreachable (a restart, an
// election) with a growing backoff; only the first attempt reports such an
// error at once.
func (q *acquisition) pause(err error) error {
	c := q.m.c
	q.backoff = min(max(2*q.backoff, 10*time.Millisecond), time.Second)
	c.cfg.logger.Debug("dlock: backend unavailable while waiting; retrying",
		"lock", q.m.name, "backend", c.desc, "in", q.backoff, "err", err)
	return dur.Sleep(q.a.ctx, q.backoff)
}

// attempt makes the Waiter's next attempt.
func (q *acquisition) attempt() (Grant, error) {
	q.sent = q.m.c.cfg.clock.Now()
	g, err := q.a.attempt(q.w)
	q.busy = isNoAnswer(err)
	q.cut = q.a.cut(err)
	if err == nil && g.Age > 0 {
		q.sent = q.sent.Add(-g.Age)
	}
	return g, err
}

// lateRenewals bounds how often freshen renews a grant that keeps coming
// back already over, and how often Lock waits again after such a grant was
// lost.
const lateRenewals = 3

var errLateGrant = errors.New("granted after the TTL had passed")

// errNoAnswer is the cause of an acquisition whose ctx ended before the
// store answered its last attempt.
var errNoAnswer = fmt.Errorf("%w: the store did not answer before the context ended", ErrBackendUnavailable)

// freshen renews a grant whose answer arrived after its validity was over
// (the store stalled longer than the TTL, as in a failover or an election):
// Lock never returns a lease that is over before the caller sees it. A
// store that answers every renewal that late is an error, and the hold is
// released in the background.
func (q *acquisition) freshen(g Grant) error {
	c, ttl := q.m.c, q.m.cfg.ttl
	h := Hold{Name: q.a.key, Owner: q.a.owner, Token: g.Token, Handle: g.Handle}
	valid := func() bool {
		return c.cfg.clock.Now().Before(q.sent.Add(time.Duration(float64(ttl) * (1 - c.cfg.drift))))
	}
	var err error
	for i := 0; i < lateRenewals && !valid(); i++ {
		q.sent = c.cfg.clock.Now()
		if err = renewBounded(c, q.a.limit, q.a.ctx, h, ttl); errors.Is(err, ErrLeaseLost) {
			return fmt.Errorf("%w (%v), and lost before it could be renewed: %w", errLateGrant, ttl, err)
		}
	}
	if err == nil && valid() {
		return nil
	}
	a := q.a
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		a.releaseLate(h)
	}()
	if err == nil {
		err = fmt.Errorf("%w: the store answered %d renewals after the TTL (%v) had passed; the TTL is too short for this store", ErrBackendUnavailable, lateRenewals, ttl)
	}
	return err
}

// abandon undoes what a failed acquisition may have left behind — a grant
// whose answer was cut off, a registered Waiter — and returns the kind and
// the error to report.
func (q *acquisition) abandon(err error) (kind, _ error) {
	if q.cut && !q.busy {
		// The attempt was cut off by ctx: it may have been granted.
		a := q.a
		a.c.bg.Add(1)
		go func() {
			defer a.c.bg.Done()
			a.compensate()
		}()
	}
	if q.w != nil && !q.busy {
		q.a.cancel(q.w)
	}
	if q.m.c.closing.Err() != nil {
		return ErrClosed, err
	}
	if ctxErr := q.a.ctx.Err(); ctxErr != nil {
		// The wait ended by cancellation: match ErrNotAcquired and ctx.Err().
		if !errors.Is(err, ctxErr) {
			err = chain{err, ctxErr}
		}
		// A store that did not answer is not a busy lock: a caller that
		// skips its work on ErrNotAcquired must be told the store is down.
		switch {
		case errors.Is(err, ErrBackendUnavailable):
		case q.cut:
			err = chain{errNoAnswer, err}
		case q.down != nil:
			err = chain{q.down, err}
		}
		if q.lastBusy != nil && !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrBackendUnavailable) {
			// Say who held the lock when the wait ended.
			err = chain{q.lastBusy, err}
		}
		return ErrNotAcquired, err
	}
	return kindOf(err), err
}

// CheckName reports whether name is a valid lock name: 1-255 bytes of
// valid UTF-8 without NUL. The error matches [ErrInvalidName]. Lock and
// TryLock check names themselves; CheckName lets a program refuse a bad
// name before it connects to a backend.
func CheckName(name string) error {
	if msg := validName(name, MaxNameLen); msg != "" {
		return &Error{Op: "check", Name: name, Kind: ErrInvalidName, Err: fmt.Errorf("name %s", msg)}
	}
	return nil
}

var ownerPrefix = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d/", host, os.Getpid())
}()

// newOwner returns a fresh owner id: host and pid for people reading
// `dlock status`, and 128 random bits so that no two acquisitions share it.
func newOwner() string {
	var b [16]byte
	var h [32]byte
	rand.Read(b[:])
	hex.Encode(h[:], b[:])
	var s strings.Builder // one allocation
	s.Grow(len(ownerPrefix) + len(h))
	s.WriteString(ownerPrefix)
	s.Write(h[:])
	return s.String()
}

type leaseKey struct{}

// WithLease returns a context that carries lease l. A Lock or TryLock of the
// same lock name on the same backend with this context re-enters l instead
// of waiting for it: it gets l's token and a hold count kept on the backend,
// and must be unlocked on its own. Locks of other names are not affected.
func WithLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFrom returns the lease carried by ctx (see [WithLease]), or nil.
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// retryDelay is how soon a renewal that failed without losing the lease is
// tried again: often enough for several tries within the lease.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 5*time.Millisecond), time.Second)
}
