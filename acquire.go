package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
)

// spec is what every acquisition of a primitive asks: the Client, the
// name and options, the kind and limit the store records, and the weight
// of the request. Each primitive keeps its own, so that an acquisition
// allocates none.
type spec struct {
	c      *Client
	name   string
	cfg    config
	kind   Kind
	limit  int
	weight int
}

func (s *spec) acquire(ctx context.Context, op string, wait bool, value string) (*Lease, error) {
	if s.c.cfg.tracer == nil {
		return s.run(ctx, op, wait, value, nil)
	}
	return s.traced(ctx, op, wait, value)
}

// traceState is what a traced acquisition tells its Tracer.
type traceState struct {
	t   Tracer
	ctx context.Context // as AcquireStart returned it
	a   TraceAcquire
}

// traced is acquire with a Tracer: it brackets the acquisition with
// AcquireStart and AcquireEnd.
func (s *spec) traced(ctx context.Context, op string, wait bool, value string) (*Lease, error) {
	c := s.c
	ts := &traceState{t: c.cfg.tracer, ctx: ctx, a: TraceAcquire{Name: s.name, Op: op, Kind: s.kind,
		Limit: s.limit, Weight: s.weight, Backend: c.desc, Start: c.cfg.clock.Now()}}
	c.traced(func() {
		if tctx := ts.t.AcquireStart(ctx, ts.a); tctx != nil {
			ts.ctx = tctx
		}
	})
	l, err := s.run(ctx, op, wait, value, ts)
	end := TraceAcquireEnd{Lease: l, Err: err, Waited: c.cfg.clock.Now().Sub(ts.a.Start), Outcome: OutcomeGranted}
	if err != nil {
		var e *Error
		errors.As(err, &e)
		end.Outcome = outcomeOf(e.Kind)
		switch {
		case errors.Is(err, ErrBackendUnavailable):
			end.Outcome = OutcomeUnavailable
		case e.Kind == ErrNotAcquired && ctx.Err() != nil:
			end.Outcome = OutcomeCanceled
		}
	}
	c.traced(func() { ts.t.AcquireEnd(ts.ctx, ts.a, end) })
	return l, err
}

// run is one acquisition after its tracing (ts is nil without a Tracer).
func (s *spec) run(ctx context.Context, op string, wait bool, value string, ts *traceState) (*Lease, error) {
	c := s.c
	fail := func(kind, err error) (*Lease, error) {
		return nil, &Error{Op: op, Name: s.name, Backend: c.desc, Kind: kind, Err: err}
	}
	if kind, err := s.check(ctx); err != nil {
		return fail(kind, err)
	}
	key := encodeKey(c.cfg.namespace, s.name)
	owner, err := s.owner(ctx, key)
	if err != nil {
		if errors.Is(err, ErrInvalidOption) {
			return fail(ErrInvalidOption, err)
		}
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

	q := acquisition{s: s, ts: ts, a: calls{c: c, limit: limit, ctx: ctx, name: s.name, key: key, owner: owner, kind: s.kind, fresh: fresh}}
	// A weighted name's waiters queue in arrival order whatever Fair
	// says: the head-of-line rule that keeps a writer from starving.
	fair := s.cfg.fair || s.kind != KindMutex
	req := Request{Name: key, Owner: owner, Fresh: fresh, TTL: s.cfg.ttl, Fair: fair, Wait: wait, Kind: s.kind, Limit: s.limit, Weight: s.weight, Value: value}
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
	l := newLease(c, s, key, owner, g, q.sent)
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
func (s *spec) check(ctx context.Context) (kind, err error) {
	if msg := validName(s.name, MaxNameLen); msg != "" {
		return ErrInvalidName, fmt.Errorf("name %s", msg)
	}
	if err := s.cfg.check(false); err != nil {
		return ErrInvalidOption, err
	}
	if err := s.c.checkTTL(s.cfg.ttl); err != nil {
		return ErrInvalidOption, err
	}
	if s.cfg.minHold > 0 {
		if d, ok := s.c.b.(Detacher); !ok || !d.CanDetach() {
			return ErrInvalidOption, errors.New("MinHold needs a backend whose holds outlive the client (see Detacher); this one frees a hold when its client is gone")
		}
	}
	if s.kind != KindMutex {
		if err := s.checkWeight(); err != nil {
			return ErrInvalidOption, err
		}
		if err := s.c.canGrant(s.kind, s.limit); err != nil {
			return ErrInvalidOption, err
		}
	}
	if err := ctx.Err(); err != nil {
		return ErrNotAcquired, err
	}
	return nil, nil
}

// owner returns the owner to acquire key with: that of a lease of the same
// lock carried by ctx (which then re-enters), else the Mutex's explicit
// Owner, else "" for a fresh one. An outer lease that is over is an error.
func (s *spec) owner(ctx context.Context, key string) (string, error) {
	if outer := LeaseFrom(ctx); outer != nil && outer.c.b == s.c.b && outer.key == key {
		if err := outer.Err(); err != nil {
			return "", fmt.Errorf("the outer lease in the context is over: %w", err)
		}
		if outer.kind != s.kind {
			return "", &ConflictError{Kind: outer.kind, Limit: int(outer.limit), AskedKind: s.kind, AskedLimit: s.limit}
		}
		if w := outer.Weight(); w < s.weight {
			return "", fmt.Errorf("the outer lease in the context holds %d, this request asks %d: %w", w, s.weight, ErrUpgrade)
		}
		return outer.owner, nil
	}
	return s.cfg.owner, nil
}

// An acquisition is one Lock or TryLock after its checks: the first
// attempt, then for Lock the wait-and-attempt loop over the backend's
// Waiter, and on failure the undoing of what it may have left behind.
type acquisition struct {
	s        *spec
	ts       *traceState // nil without a Tracer
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
	q.sent = q.s.c.cfg.clock.Now()
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
	if onWait := q.s.cfg.onWait; onWait != nil || q.ts != nil {
		var held *HeldError
		if errors.As(refusal, &held) && (held.Holder.Owner != q.seen.Owner || held.Holder.Token != q.seen.Token) {
			q.seen = held.Holder
			if onWait != nil {
				onWait(held.Holder)
			}
			if ts := q.ts; ts != nil {
				w := TraceWait{Holder: held.Holder, Held: held.Held, Limit: held.Limit}
				q.s.c.traced(func() { ts.t.AcquireWait(ts.ctx, ts.a, w) })
			}
		}
	}
	return q.a.wait(q.w)
}

// pause rides out a store that is briefly unreachable (a restart, an
// election) with a growing backoff; only the first attempt reports such an
// error at once.
func (q *acquisition) pause(err error) error {
	c := q.s.c
	q.backoff = min(max(2*q.backoff, 10*time.Millisecond), time.Second)
	c.cfg.logger.Debug("dlock: backend unavailable while waiting; retrying",
		"lock", q.s.name, "backend", c.desc, "in", q.backoff, "err", err)
	return dur.Sleep(q.a.ctx, q.backoff)
}

// attempt makes the Waiter's next attempt.
func (q *acquisition) attempt() (Grant, error) {
	q.sent = q.s.c.cfg.clock.Now()
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
	c, ttl := q.s.c, q.s.cfg.ttl
	h := Hold{Name: q.a.key, Owner: q.a.owner, Token: g.Token, Handle: g.Handle, Kind: q.a.kind}
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
	if q.s.c.closing.Err() != nil {
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

// checkWeight refuses a limit or weight out of range before any backend
// call: a weight above the limit could never be granted, so it is an
// error at once rather than a wait forever.
func (s *spec) checkWeight() error {
	switch {
	case s.limit < 1 || s.limit > MaxLimit:
		return fmt.Errorf("limit %d of a %s is outside [1, %d]", s.limit, s.kind, MaxLimit)
	case s.weight < 1 || s.weight > s.limit:
		return fmt.Errorf("weight %d is outside [1, %d], the limit of the %s", s.weight, s.limit, Shape(s.kind, s.limit))
	}
	return nil
}
