package redlock

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// waiter is a waiting acquisition: it hears the release notices of every
// master that name it (see notices) and retries once they show enough free
// masters for a quorum, at the latest when the holder's lease would end,
// and after a short random pause when contenders collided.
type waiter struct {
	b      *Backend
	req    dlock.Request
	qid    string    // the waiter's id in the queues
	chans  [2]string // the lock's channel, and its channel for this Backend
	mode   string
	ticket int64
	done   *atomic.Bool // see attempt.done
	wake   chan struct{}
	named  chan struct{} // a notice named the waiter before a quorum of them came (see Wait)
	first  bool          // the next Wait returns at once
	// attached says, per master and channel, whether the waiter is
	// attached to its notices; nil while it is attached to none.
	attached [][2]bool
	res      attemptResult
	once     sync.Once
	// handed carries the attempt a release sent for the waiter while it
	// was parked (see pass.go); pending is that attempt, until Acquire or
	// Cancel finishes it. parkedAt is the waiter's key among the parked.
	handed   chan *handed
	pending  *handed
	parkedAt string

	mu      sync.Mutex
	noticed uint64 // masters that sent a release notice since the last attempt
	heard   bool   // a notice since the last attempt named the waiter
	free    uint64 // masters that answered the last attempt and that no other owner held
}

// notice records a release notice from master i, which named the waiter
// or (named false) any waiter of the lock, and wakes the waiter once
// enough masters are free for a quorum: a first notice while most masters
// are still being released would only make an attempt that fails. A
// master counts once, noticed or free: the notice of a master that was
// free anyway — the give-back of this waiter's own grant there, say —
// frees nothing more. The first notice that names the waiter without
// making a quorum tells Wait so (see there).
func (w *waiter) notice(i int, named bool) {
	w.mu.Lock()
	w.noticed |= 1 << (i % 64) // (beyond 64 masters, notices wake early)
	ready := bits.OnesCount64(w.noticed|w.free) >= w.b.quorum || i >= 64
	first := named && !w.heard
	w.heard = w.heard || named
	w.mu.Unlock()
	switch {
	case ready:
		select {
		case w.wake <- struct{}{}:
			w.b.woken.Add(1)
		default:
		}
	case first:
		select {
		case w.named <- struct{}{}:
		default:
		}
	}
}

// attempted records the result of the last attempt, which says which
// masters were free. A master that did not answer in time (the attempt
// stopped reading once a quorum was out of reach) is not known to be
// free: counting it so would wake the waiter on fewer notices than a
// quorum, before the release reached enough masters.
func (w *waiter) attempted(res attemptResult) {
	w.mu.Lock()
	w.res = res
	w.free = 0
	for _, i := range res.free {
		w.free |= 1 << (i % 64)
	}
	w.mu.Unlock()
}

// maxWait bounds one wait without a notice or a holder's lease ending
// (a Wait lasts up to a quarter more, at random, so that waiters spread
// out). It is the fallback for a waiter that was named in a release
// notice and died before it tried: the others learn that the lock is free
// when their wait ends. Its attempts also keep the waiter's place in the
// queues, which ends waiterTimeout after the last one, so it stays below
// that. The waiters of a lock make about waiters/maxWait attempts a
// second between them, whatever the number of releases.
const maxWait = 3 * time.Second

func (b *Backend) newWaiter(req dlock.Request, qid, mode string, ticket int64, done *atomic.Bool) *waiter {
	ch := b.channel(req.Name)
	w := &waiter{b: b, req: req, qid: qid, mode: mode, ticket: ticket, done: done, wake: make(chan struct{}, 1), named: make(chan struct{}, 1), handed: make(chan *handed, 1), first: true}
	w.chans = [2]string{ch, ch + ":" + b.id}
	return w
}

// tryAttach attaches w to the notices of every master where its channels
// have subscriptions, if all of them are confirmed, and reports whether it
// did.
func (w *waiter) tryAttach() bool {
	for i := range w.b.notices {
		for _, ch := range w.chans {
			if !w.b.notices[i].confirmed(ch) {
				return false
			}
		}
	}
	w.attached = make([][2]bool, len(w.b.notices))
	all := true
	for i := range w.b.notices {
		for j, ch := range w.chans {
			var ok bool
			w.attached[i][j], ok = w.b.notices[i].tryAttach(w, ch)
			all = all && ok
		}
	}
	return all
}

// attach attaches w to the notices on its channels of every master where
// it is not attached yet, subscribing where needed.
func (w *waiter) attach() {
	if w.attached == nil {
		w.attached = make([][2]bool, len(w.b.notices))
	}
	for i := range w.b.notices {
		for j, ch := range w.chans {
			if !w.attached[i][j] {
				w.b.notices[i].attach(w, ch)
				w.attached[i][j] = true
			}
		}
	}
}

// Wait returns on a release notice, when the holder's lease may have ended,
// or (after a collision of contenders) after a short random pause. The
// first Wait returns without waiting for a notice unless the waiter was
// attached to confirmed subscriptions on every master before its first
// attempt: otherwise a release between that attempt and the subscription
// would go unnoticed. It returns once the subscriptions are confirmed
// (see subscribed), so that the next attempt comes after them: a
// release after that attempt is then heard.
func (w *waiter) Wait(ctx context.Context) error {
	if w.first {
		w.first = false
		w.subscribed(ctx)
		return ctx.Err()
	}
	if w.res.split {
		// Contenders split the masters: everyone gave back, so wait a
		// random moment (the Redlock retry delay) instead of all retrying
		// on the same notice. A contender that came within one master of
		// a quorum waits least, so that it usually gets it the next time
		// instead of all colliding again.
		d := time.Duration(1+rand.IntN(15)) * time.Millisecond
		if w.res.near {
			d = time.Duration(rand.IntN(300)) * time.Microsecond
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-w.wake:
		default:
		}
		return nil
	}
	d := maxWait
	// The lease ends on the quorum-th master when enough of them let it
	// go; waiting for the shortest remaining lease is early, never late.
	// A promise of the free lock to another waiter (no owner) is not
	// waited out: that waiter takes the lock and a later release names
	// the next one, and if it died, maxWait is the fallback. Otherwise
	// every waiter that saw a promise would try again when it ends, a
	// herd at every release.
	for _, r := range w.res.held {
		if r.owner != "" && r.ttl > 0 && r.ttl < d {
			d = r.ttl
		}
	}
	d += time.Duration(rand.Int64N(int64(d/4) + int64(5*time.Millisecond)))
	t := time.NewTimer(d)
	defer t.Stop()
	end := time.Now().Add(d)
	if w.mode == modeFair {
		// A release in this process may send the waiter's attempt along.
		w.park()
	}
	for {
		select {
		case h := <-w.handed:
			w.parkedAt = "" // taken out of the parked by the release
			w.pending = h
			return nil
		case <-w.wake:
			w.unpark()
			return nil
		case <-w.named:
			// A notice named the waiter. Usually the notices of a
			// quorum follow at once; but where the masters' queues
			// disagree on their head (as while a crowd of waiters joins
			// them, each master queueing them in the order their
			// requests came), the others named other waiters, none of
			// them may hear a quorum, and nobody would try before
			// maxWait with the lock free. The promises of those
			// masters end a node timeout after their notices: try
			// then, as the other named waiters do.
			nt := w.b.cfg.nodeTimeout
			nd := nt + time.Millisecond + time.Duration(rand.Int64N(int64(nt/4)+1))
			if time.Until(end) > nd {
				t.Reset(nd)
				end = time.Now().Add(nd)
			}
		case <-t.C:
			w.unpark()
			return nil
		case <-ctx.Done():
			w.unpark()
			if w.pending != nil {
				return nil // Acquire (or Cancel) finishes the attempt sent for it
			}
			return ctx.Err()
		}
	}
}

// subscribed waits until every master confirmed the subscriptions to the
// waiter's channels, for at most the node timeout (a master that does not
// answer holds up no attempt; the waiter hears it once it confirms) or
// until ctx ends. The notice of a release that comes after an attempt but
// before the confirmation is heard by nobody: if the attempt did not
// wait, the waiter would wait for maxWait, and so would every other
// waiter, since a notice names one waiter.
func (w *waiter) subscribed(ctx context.Context) {
	var t *time.Timer
	for i := range w.b.notices {
		for _, ch := range w.chans {
			ready := w.b.notices[i].ready(ch)
			if ready == nil {
				continue
			}
			select {
			case <-ready:
				continue
			default:
			}
			if t == nil {
				t = time.NewTimer(w.b.cfg.nodeTimeout)
				defer t.Stop()
			}
			select {
			case <-ready:
			case <-t.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

// Acquire makes the next attempt.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.mu.Lock()
	w.noticed, w.heard = 0, false
	w.mu.Unlock()
	select {
	case <-w.wake:
	default:
	}
	select {
	case <-w.named:
	default:
	}
	var g dlock.Grant
	var res attemptResult
	var err error
	if h := w.pending; h != nil {
		w.pending = nil
		g, res, err = w.handedAttempt(ctx, h)
	} else {
		g, res, err = w.b.attempt(ctx, w.req, w.qid, w.mode, w.ticket, w.done)
	}
	if err == nil {
		w.close()
		return g, nil
	}
	w.attempted(res)
	return g, err
}

// Cancel stops the notices to the waiter and takes it out of the queues,
// passing a release notice it may have been named in to the next waiter.
// An attempt never leaves a grant behind, so there is nothing else to
// withdraw, but for an attempt a release sent for the waiter (see pass.go)
// that it did not finish: Cancel finishes it and releases what it got.
func (w *waiter) Cancel(ctx context.Context) error {
	if h := w.pending; h != nil {
		// An attempt a release sent for the waiter: finish it, and give
		// back what it got.
		w.pending = nil
		if g, _, err := w.handedAttempt(ctx, h); err == nil {
			w.b.Release(context.WithoutCancel(ctx), dlock.Hold{Name: w.req.Name, Owner: w.req.Owner, Token: g.Token, Handle: g.Handle, Kind: w.req.Kind})
		}
	}
	w.close()
	w.done.Store(true)
	return w.b.cancel(ctx, w.req.Name, w.qid)
}

func (w *waiter) close() {
	w.once.Do(func() {
		for i, on := range w.attached {
			for j, ch := range w.chans {
				if on[j] {
					w.b.notices[i].detach(w, ch)
				}
			}
		}
	})
}
