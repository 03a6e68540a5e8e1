package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/dlock-dev/dlock"
)

// Without a Feed, a waiter looks at the lock's state again after a delay
// that starts at fallbackMin and doubles up to fallbackMax — except a fair
// waiter, see fairDelay.
const (
	fallbackMin = 5 * time.Millisecond
	fallbackMax = 100 * time.Millisecond
)

// fairDelay is how long a fair waiter waits, without a Feed, before it
// looks again, when the lock's holder and queue head have not changed for
// still: 1/20 of that, between fallbackMin and fallbackMax. Only the head
// of the queue can take the lock when it frees, and nothing announces the
// release (or its own turn) to it, so the time it takes to notice is the
// hand-off to the next holder: by this schedule that delay stays a small
// part of the holds it waits behind (behind holds of 200 ms it notices
// within 10 ms, where doubling would look every 100 ms), while a lock that
// stays held long is looked at every fallbackMax.
func fairDelay(still time.Duration) time.Duration {
	return min(max(still/20, fallbackMin), fallbackMax)
}

// waiter is a waiting acquisition: a fair one has a row in the waiters
// table (seq), a plain one only its watches. Like every dlock.Waiter it is
// used by one goroutine at a time.
type waiter struct {
	e     *Engine
	req   dlock.Request
	seq   int64 // the queue row; NoSeq when not in the fair queue
	fair  bool
	slot  *slot        // the waiter's registration with Local
	sub   Subscription // from the first Wait on; nil without a Feed
	since time.Time    // when the waiter was made
	ended bool

	// The holder's token and the queue head of the last look, and since
	// when the looks have seen them (see fairDelay).
	seenToken uint64
	seenHead  int64
	seenSince time.Time

	// pending is the look at the state right after the last refused
	// attempt, with the channels taken before that attempt: the next Wait
	// starts from it instead of reading the state again.
	pending *pendingLook

	weighted bool // a request of a weighted kind: see wwait, wacquire
}

type pendingLook struct {
	s             lockState
	local, remote <-chan struct{}
}

var errEnded = errors.New("waiter already ended by a grant or Cancel")

// newWaiter returns the waiter of req, at queue position seq (NoSeq: not
// in the fair queue), whose queue row was made at sent.
func (e *Engine) newWaiter(req dlock.Request, seq int64, sent time.Time) *waiter {
	w := &waiter{
		e: e, req: req, seq: seq, fair: seq != NoSeq,
		slot:  e.local.register(req.Name, seq != NoSeq, seq),
		since: time.Now(),
	}
	w.seenSince = w.since
	if w.fair {
		e.beats.set(w, seq, sent)
	}
	return w
}

// end drops the waiter's registrations. The queue row is the caller's
// business.
func (w *waiter) end() {
	if w.ended {
		return
	}
	w.ended = true
	if w.sub != nil {
		w.sub.Close()
	}
	if w.fair {
		w.e.beats.drop(w)
	}
	w.e.local.unregister(w.slot)
}

// channels returns the channels that a change after this call closes;
// consume says the waiter is about to try (plain) or to look (fair), which
// uses up an in-process wake-up it got.
func (w *waiter) channels(consume bool) (local, remote <-chan struct{}) {
	if consume {
		local = w.e.local.consume(w.slot, !w.fair)
	} else {
		local = w.e.local.changed(w.slot)
	}
	if w.sub != nil {
		remote = w.sub.Changed()
	}
	return local, remote
}

// deferDelay is how long a plain waiter that finds the lock free waits
// again while another waiter of this process, woken by a release, tries.
const deferDelay = 5 * time.Millisecond

// Wait returns when an attempt may succeed: the lock is free (or expired)
// and, for a fair waiter, no live waiter is queued before it; or when ctx
// is done (then it returns ctx.Err()). It wakes on a release in this
// process, on a change committed by another connection (the Feed), when
// the holder's remaining TTL by the database's clock has passed, or when
// the first fair waiter may have died. A fair waiter's queue row is
// refreshed every third of the waiter timeout meanwhile (see
// Engine.beat).
func (w *waiter) Wait(ctx context.Context) error {
	if w.weighted {
		return w.wwait(ctx)
	}
	if err := w.start(ctx); err != nil {
		return err
	}
	fallback := fallbackMin
	p := w.pending
	w.pending = nil
	for {
		look, err := w.next(ctx, p)
		p = nil
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil // let the attempt report it
		}
		bound, ready := w.bound(look.s, &fallback)
		if ready {
			return nil
		}
		if try, err := w.sleep(ctx, bound, look.local, look.remote); try {
			return err
		}
	}
}

// start checks that the waiter may wait, and subscribes to the Feed on
// the first Wait.
func (w *waiter) start(ctx context.Context) error {
	if w.ended {
		return errEnded
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.e.checkOpen(); err != nil {
		return err
	}
	if feed := w.e.local.feed; w.sub == nil && feed != nil {
		sub, err := feed.Subscribe(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		w.sub = sub
	}
	return nil
}

// next returns the look to decide on: p if set, else a new look, taken
// after the channels (a change after the look closes one of them) and
// after a fair waiter's heartbeat when one is due.
func (w *waiter) next(ctx context.Context, p *pendingLook) (pendingLook, error) {
	if p != nil {
		return *p, nil
	}
	local, remote := w.channels(w.fair)
	if w.fair {
		if err := w.keepAlive(ctx); err != nil && ctx.Err() != nil {
			return pendingLook{}, ctx.Err()
		}
	}
	s, err := w.look(ctx, remote)
	return pendingLook{s: s, local: local, remote: remote}, err
}

// bound returns how long to sleep before looking again at a lock in state
// s, or ready when an attempt may succeed now (or should report a fault).
// fallback is the backing-off interval of a waiter without a Feed.
func (w *waiter) bound(s lockState, fallback *time.Duration) (d time.Duration, ready bool) {
	bound := time.Duration(math.MaxInt64)
	switch {
	case s.fault != "":
		return 0, true // let the attempt report it
	case s.mayAcquire(w.req.Owner, w.seq):
		if w.fair || w.e.local.claim(w.slot) {
			return 0, true
		}
		// Another waiter here is trying: its attempt commits (which the
		// feed reports) or fails soon, and leaves its look in the cache.
		bound = deferDelay
	case s.heldByOther(w.req.Owner):
		bound = s.remaining + time.Millisecond
	case s.ahead(w.seq):
		bound = s.queueTTL + time.Millisecond
	}
	if w.fair {
		sent, _ := w.e.beats.of(w)
		bound = min(bound, time.Until(sent.Add(w.e.wttl/3)))
	}
	if w.sub == nil {
		if w.fair {
			*fallback = fairDelay(w.still(s))
		}
		bound = min(bound, *fallback)
		*fallback = min(*fallback*2, fallbackMax)
	}
	return max(bound, 0), false
}

// still returns how long the looks have seen the holder and queue head of
// s.
func (w *waiter) still(s lockState) time.Duration {
	if s.token != w.seenToken || s.head != w.seenHead {
		w.seenToken, w.seenHead, w.seenSince = s.token, s.head, time.Now()
	}
	return time.Since(w.seenSince)
}

// sleep waits up to d for a wake-up. try reports that Wait should return
// (with err): ctx is done, or a release in this process woke a plain
// waiter, which tries at once (a fair one looks whether it is its turn).
func (w *waiter) sleep(ctx context.Context, d time.Duration, local, remote <-chan struct{}) (try bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-local:
		// This waiter and no other was woken; see Local. A fair waiter
		// looks whether it is its turn, unless the Feed said it is.
		return !w.fair || w.e.local.takeTurn(w.slot), nil
	case <-remote:
	case <-t.C:
	case <-ctx.Done():
		return true, ctx.Err()
	}
	return false, nil
}

// look reads the lock's state for this waiter. The waiters of this
// process share their looks taken in the feed generation gen (that is,
// after the last change the feed reported); they take turns to look, in
// the turns of the name's writes where the database writes concurrently
// (see writeName), so that a herd woken at once reads the state once, on
// one connection, rather than each on its own.
func (w *waiter) look(ctx context.Context, gen <-chan struct{}) (lockState, error) {
	if s, ok := w.e.local.cached(w.req.Name, gen, w.slot); ok {
		return s, nil
	}
	key := lookKey(w.req.Name)
	if w.e.d.ConcurrentWrites {
		key = w.req.Name
	}
	if err := w.e.local.lockWrite(ctx, key); err != nil {
		return lockState{}, err
	}
	defer w.e.local.unlockWrite(key)
	if s, ok := w.e.local.cached(w.req.Name, gen, w.slot); ok {
		return s, nil
	}
	at, epoch := time.Now(), w.e.local.epochNow()
	sctx, done := w.e.seeThrough(ctx)
	s, err := w.e.state(sctx, &w.e.pool, w.req.Name) // see Engine.retry
	err = done(err)
	if err == nil {
		w.e.local.cache(w.req.Name, w.slot, gen, epoch, s, at)
	}
	return s, err
}

// lookKey is the key of Local's lock that the waiters of name take turns
// to look under where writes take one lock for all names; a name that is
// such a key itself only shares its lock.
func lookKey(name string) string { return "\x00look\x00" + name }

// keepAlive keeps the fair waiter's queue row alive: when its beat is due,
// the engine's shared beat refreshes it with the rows of the process's
// other fair waiters (see Engine.beat); if the last shared beat missed
// the row, the waiter refreshes it on its own, queueing again if it died.
func (w *waiter) keepAlive(ctx context.Context) error {
	sent, solo := w.e.beats.of(w)
	switch {
	case solo:
		return w.heartbeat(ctx)
	case time.Since(sent) >= w.e.wttl/3:
		return w.e.beat(ctx, w)
	}
	return nil
}

// heartbeat refreshes the fair waiter's queue row on its own. If the row
// died (the process was paused past the waiter timeout and others swept
// it out), the waiter queues again at the end.
func (w *waiter) heartbeat(ctx context.Context) error {
	sent := time.Now()
	err := w.e.writeName(ctx, w.req.Name, func(ctx context.Context) error {
		return w.e.tx(ctx, func(c *sql.Conn) error {
			return w.refresh(ctx, c)
		})
	})
	if err == nil {
		w.e.beats.set(w, w.seq, sent)
	}
	return err
}

// refresh refreshes the queue row or queues again, in c's transaction.
func (w *waiter) refresh(ctx context.Context, c *sql.Conn) error {
	res, err := c.ExecContext(ctx, w.e.q.beat, ttlMillis(w.e.wttl), w.seq)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	seq, err := w.e.enqueue(ctx, c, w.req)
	if err == nil {
		w.seq = seq
		w.e.local.setSeq(w.slot, seq)
	}
	return err
}

// Acquire makes the next attempt. A fair waiter's attempt and the removal
// of its queue row when granted (or the read of the state when not) are
// one transaction; its row is kept alive by the shared beat.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.ended {
		return dlock.Grant{}, errEnded
	}
	if err := w.e.checkOpen(); err != nil {
		return dlock.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, err
	}
	if w.weighted {
		return w.wacquire(ctx)
	}
	local, remote := w.channels(true)
	epoch := w.e.local.epochNow()
	if !w.fair {
		at := time.Now()
		g, s, err := w.e.try(ctx, w.req)
		w.e.local.tried(w.slot)
		switch {
		case err == nil:
			w.end()
		case errors.Is(err, dlock.ErrNotAcquired):
			w.e.local.cache(w.req.Name, w.slot, remote, epoch, s, at)
			w.pending = &pendingLook{s: s, local: local, remote: remote}
		}
		return g, err
	}
	sent := time.Now()
	g, ok, s, err := w.fairAttempt(ctx)
	if err != nil {
		return dlock.Grant{}, w.e.wrap(err)
	}
	if ok {
		w.e.local.forget(w.req.Name)
		w.end()
		return g, nil
	}
	w.e.local.cache(w.req.Name, w.slot, remote, epoch, s, sent)
	w.pending = &pendingLook{s: s, local: local, remote: remote}
	return dlock.Grant{}, w.e.refusal(w.req.Name, s, w.req.Owner, w.seq)
}

// fairAttempt makes the fair waiter's attempt and, when it is granted,
// removes its queue row, in one statement where the dialect has
// WritableCTE, else in one transaction; when it is refused, it reads the
// lock's state.
func (w *waiter) fairAttempt(ctx context.Context) (g dlock.Grant, ok bool, s lockState, err error) {
	err = w.e.writeName(ctx, w.req.Name, func(ctx context.Context) error {
		if w.e.q.grantDequeue == "" {
			return w.e.tx(ctx, func(c *sql.Conn) error {
				var err error
				if g, ok, err = w.e.attempt(ctx, c, w.req, w.seq); err != nil {
					return err
				}
				if ok {
					_, err = c.ExecContext(ctx, w.e.q.dequeue, w.seq)
					return err
				}
				s, err = w.e.state(ctx, c, w.req.Name)
				return err
			})
		}
		ttl := ttlMillis(w.req.TTL)
		args := append(NewRowArgs(w.req.Name, w.req.Owner, ttl, w.seq), SetArgs(w.req.Owner, ttl)...)
		args = append(args, CondArgs(w.req.Owner, w.req.Name, w.seq)...)
		args = append(args, w.seq)
		var err error
		if ok, err = queryOne(ctx, &w.e.pool, w.e.q.grantDequeue, args, &g.Token, &g.Count); err != nil || ok {
			return err
		}
		s, err = w.e.state(ctx, &w.e.pool, w.req.Name)
		return err
	})
	return g, ok, s, err
}

// Cancel withdraws the waiter: a fair waiter deletes its queue row at once
// and wakes the waiters of this process, so that the one behind it can
// go. If the delete fails the row still drops out after the waiter
// timeout.
func (w *waiter) Cancel(ctx context.Context) error {
	if w.ended {
		return nil
	}
	if w.weighted {
		return w.wcancel(ctx)
	}
	w.end()
	if !w.fair {
		return nil
	}
	err := w.e.writeName(ctx, w.req.Name, func(ctx context.Context) error {
		_, err := w.e.pool.ExecContext(ctx, w.e.q.dequeue, w.seq)
		return err
	})
	w.e.local.signal(w.req.Name)
	return w.e.wrap(err)
}
