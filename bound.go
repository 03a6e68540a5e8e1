package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CancelGrace bounds how late a call returns after its context ended,
// whatever the store does: Lock, TryLock, Unlock, Extend and Inspect return
// at the latest CancelGrace after their ctx is done, even when the store
// never answers (a link that went silent after the request was sent). The
// backend's call then goes on in the background under the Client, which
// cleans up after it when it ends: a grant that arrives after its Lock gave
// up is released at once, a waiter withdrawn. Until that happens the store
// may keep such a grant, at most for its TTL. Backends are expected to honour
// ctx themselves (the SQL backends interrupt a statement CancelGrace/2
// after ctx ended, dropping its connection); CancelGrace is the Client's
// guarantee for those that cannot.
const CancelGrace = time.Second

// CloseTimeout bounds [Client.Close]: it returns within CloseTimeout plus
// [CancelGrace] whatever the store does, leaving to their TTL the leases
// it could not release in time.
const CloseTimeout = 10 * time.Second // twice releaseTimeout: see Close

// noAnswerError is the cause of a call that the Client stopped waiting for
// CancelGrace after its context ended. It matches ErrBackendUnavailable and
// the context's error.
type noAnswerError struct {
	ctxErr error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("backend unavailable: no answer %v after the context ended (%v); the call goes on in the background", CancelGrace, e.ctxErr)
}

func (e *noAnswerError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{ErrBackendUnavailable}
	}
	return []error{ErrBackendUnavailable, e.ctxErr}
}

// graceLimit is closed CancelGrace after a context is done: the latest
// moment at which an operation under that context returns. One limit
// serves all the backend calls of one operation, so that together they
// keep the bound.
type graceLimit struct {
	ch    chan struct{}
	stop  func() bool
	mu    sync.Mutex
	timer *time.Timer
	ended bool
}

// enter starts a call on the Client (see begin), bounded by CancelGrace
// after ctx ends (see newGrace); leave(limit) ends it. It fails with
// ErrClosed once the Client is closed.
func (c *Client) enter(ctx context.Context) (*graceLimit, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	return newGrace(ctx), nil
}

// leave ends a call started by enter.
func (c *Client) leave(limit *graceLimit) {
	limit.release()
	c.ops.Done()
}

// newGrace returns the limit of an operation under ctx, or nil if ctx can
// never end. Its release must be called when the operation is over.
func newGrace(ctx context.Context) *graceLimit {
	if ctx.Done() == nil {
		return nil
	}
	g := &graceLimit{ch: make(chan struct{})}
	g.stop = context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.ended {
			g.timer = time.AfterFunc(CancelGrace, func() { close(g.ch) })
		}
	})
	return g
}

// done returns the channel closed at the limit (nil for a nil limit, which
// never ends).
func (g *graceLimit) done() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.ch
}

func (g *graceLimit) release() {
	if g == nil {
		return
	}
	g.stop()
	g.mu.Lock()
	g.ended = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
}

// boundedCall is one backend call made by bounded.
type boundedCall[T any] struct {
	mu        sync.Mutex
	done      chan struct{}
	v         T
	err       error
	abandoned bool
}

// bounded calls fn(ctx) and returns its results or, if fn has not returned
// when limit ends, an error matching ErrBackendUnavailable and ctx.Err().
// fn then goes on in the background, tracked by c.bg, and late (if not
// nil) gets its results when it returns, to undo what it did. Without a
// limit, fn runs on the caller's goroutine.
func bounded[T any](c *Client, limit *graceLimit, ctx context.Context, fn func(context.Context) (T, error), late func(T, error)) (T, error) {
	if limit == nil {
		return fn(ctx)
	}
	call := &boundedCall[T]{done: make(chan struct{})}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		v, err := fn(ctx)
		call.mu.Lock()
		call.v, call.err = v, err
		abandoned := call.abandoned
		close(call.done)
		call.mu.Unlock()
		if abandoned && late != nil {
			late(v, err)
		}
	}()
	select {
	case <-call.done:
		return call.v, call.err
	case <-limit.done():
	}
	call.mu.Lock()
	defer call.mu.Unlock()
	select {
	case <-call.done: // it answered meanwhile: take the answer
		return call.v, call.err
	default:
	}
	call.abandoned = true
	var zero T
	return zero, &noAnswerError{ctxErr: ctx.Err()}
}

// calls makes the backend calls of one Lock or TryLock under its limit
// (see bounded), and undoes those left running when they end.
type calls struct {
	c                *Client
	limit            *graceLimit
	ctx              context.Context
	name, key, owner string
	kind             Kind
	fresh            bool // owner was made for this acquisition
}

// cut reports whether an attempt that ended with err was cut off by the
// end of ctx with its outcome unknown (not a refusal).
func (a *calls) cut(err error) bool {
	return err != nil && a.ctx.Err() != nil && !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrInvalidOption) && !errors.Is(err, ErrInvalidName)
}

// compensate releases the grant that an attempt cut off by ctx may have
// made, when the owner was made for this acquisition (so any hold of it
// is that grant) and the backend can list holders: it looks for the hold
// and releases it, retrying for up to releaseTimeout while the store
// cannot be reached. What it cannot release expires with its TTL.
func (a calls) compensate() {
	in, ok := a.c.b.(Inspector)
	if !a.fresh || !ok {
		return
	}
	c := a.c
	a.retry("a grant that a cancelled Lock may have made could not be looked for", func(ctx context.Context) error {
		infos, err := in.Inspect(ctx, a.key)
		for _, li := range infos {
			if err == nil && li.Name == a.key && li.Owner == a.owner {
				err = c.b.Release(ctx, Hold{Name: a.key, Owner: a.owner, Token: li.Token, Kind: a.kind})
				if err == nil {
					c.cfg.logger.Info("dlock: released a grant whose answer was cut off by the end of its Lock's context",
						"lock", a.name, "backend", c.desc, "token", li.Token)
				}
			}
		}
		return err
	})
}

// releaseLate releases h, a grant this acquisition got but will not return,
// retrying for up to releaseTimeout while the store cannot be reached (as
// compensate does). What it cannot release expires with its TTL.
func (a calls) releaseLate(h Hold) {
	a.retry("a grant that Lock could not return could not be released", func(ctx context.Context) error {
		return a.c.b.Release(ctx, h)
	})
}

// retry calls try, each time under a second's timeout, until it succeeds,
// finds the lease lost or the Client closed, or releaseTimeout has passed,
// with a growing pause between tries; it logs what (and the last error)
// when it gives up.
func (a calls) retry(what string, try func(ctx context.Context) error) {
	c := a.c
	deadline := time.Now().Add(releaseTimeout)
	var err error
	for backoff := 50 * time.Millisecond; time.Now().Before(deadline); backoff = min(2*backoff, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), min(time.Until(deadline), time.Second))
		err = try(ctx)
		cancel()
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrClosed) {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.closing.Done():
			t.Stop()
			return
		}
	}
	c.cfg.logger.Warn("dlock: "+what+"; it expires with its TTL",
		"lock", a.name, "backend", c.desc, "err", err)
}

func (a *calls) acquire(req Request) (Grant, Waiter, error) {
	if a.limit == nil {
		return a.c.b.Acquire(a.ctx, req)
	}
	type acq struct {
		g Grant
		w Waiter
	}
	b, late := a.c.b, a.late
	r, err := bounded(a.c, a.limit, a.ctx, func(ctx context.Context) (acq, error) {
		g, w, err := b.Acquire(ctx, req)
		return acq{g, w}, err
	}, func(r acq, err error) { late(r.g, r.w, err) })
	return r.g, r.w, err
}

func (a *calls) wait(w Waiter) error {
	if a.limit == nil {
		return w.Wait(a.ctx)
	}
	late := a.late
	return bounded0(a.c, a.limit, a.ctx, w.Wait, func(error) { late(Grant{}, w, ErrNotAcquired) })
}

func (a *calls) attempt(w Waiter) (Grant, error) {
	if a.limit == nil {
		return w.Acquire(a.ctx)
	}
	late := a.late
	return bounded(a.c, a.limit, a.ctx, w.Acquire, func(g Grant, err error) { late(g, w, err) })
}

// cancel withdraws w, with a context of its own but by the limit.
func (a *calls) cancel(w Waiter) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), releaseTimeout)
	defer cancel()
	var err error
	if a.limit == nil {
		err = w.Cancel(cctx)
	} else {
		err = bounded0(a.c, a.limit, cctx, w.Cancel, nil)
	}
	if err != nil {
		a.c.cfg.logger.Warn("dlock: withdrawing a waiter failed", "lock", a.name, "backend", a.c.desc, "err", err)
	}
}

// late undoes a call that its Lock stopped waiting for: it releases the
// grant it made, or withdraws the waiter.
func (a calls) late(g Grant, w Waiter, err error) {
	c := a.c
	rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err == nil {
		h := Hold{Name: a.key, Owner: a.owner, Token: g.Token, Handle: g.Handle, Kind: a.kind}
		if rerr := c.b.Release(rctx, h); rerr != nil {
			c.cfg.logger.Warn("dlock: releasing a grant that came after its Lock gave up failed; it expires with its TTL",
				"lock", a.name, "backend", c.desc, "token", g.Token, "err", rerr)
		}
		return
	}
	if w != nil {
		if cerr := w.Cancel(rctx); cerr != nil {
			c.cfg.logger.Warn("dlock: withdrawing a waiter failed", "lock", a.name, "backend", c.desc, "err", cerr)
		}
	}
	if !errors.Is(err, ErrNotAcquired) {
		// The attempt failed late, its outcome unknown.
		a.compensate()
	}
}

// renewBounded renews h under limit (see bounded).
func renewBounded(c *Client, limit *graceLimit, ctx context.Context, h Hold, ttl time.Duration) error {
	if limit == nil {
		return c.b.Renew(ctx, h, ttl)
	}
	b := c.b
	return bounded0(c, limit, ctx, func(ctx context.Context) error { return b.Renew(ctx, h, ttl) }, nil)
}

// releaseBounded releases h under limit (see bounded).
func releaseBounded(c *Client, limit *graceLimit, ctx context.Context, h Hold) error {
	if limit == nil {
		return c.b.Release(ctx, h)
	}
	b := c.b
	return bounded0(c, limit, ctx, func(ctx context.Context) error { return b.Release(ctx, h) }, nil)
}

// bounded0 is bounded for a call that returns only an error.
func bounded0(c *Client, limit *graceLimit, ctx context.Context, fn func(context.Context) error, late func(error)) error {
	var l func(struct{}, error)
	if late != nil {
		l = func(_ struct{}, err error) { late(err) }
	}
	_, err := bounded(c, limit, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }, l)
	return err
}

// waitTimeout waits for wg until d has passed; it reports whether wg was
// done. The goroutine it starts ends with wg.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// isNoAnswer reports whether err is bounded's "no answer in time".
func isNoAnswer(err error) bool {
	_, ok := err.(*noAnswerError)
	return ok
}
