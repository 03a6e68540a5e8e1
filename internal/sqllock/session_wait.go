package sqllock

import (
	"context"
	"database/sql"
	"time"

	"github.com/dlock-dev/dlock"
)

// sessionWaiter is a waiting acquisition in session mode: a connection of
// its own that waits in the server for the advisory lock. Like every
// dlock.Waiter it is used by one goroutine at a time.
type sessionWaiter struct {
	s   *Sessions
	req dlock.Request
	key any

	c      *sql.Conn
	info   ConnInfo
	locked bool       // c holds the advisory lock
	marked bool       // c carries the dialect's mark (see SessionDialect.Mark)
	lockCh chan error // the result of the Lock statement in flight; nil if none
	// interrupted says an interrupt may still be on its way to c: c must
	// not run another statement and is closed when the waiter ends.
	interrupted bool
	// remaining is the lease left to the row's holder when c held the
	// advisory lock but the row was refused.
	remaining time.Duration
	// sub and changed (taken before the last grant attempt) report the
	// changes that other connections commit, when the engine has a Feed:
	// a row refused to the holder of the advisory lock may be freed by a
	// hold that lives on the row only.
	sub      Subscription
	changed  <-chan struct{}
	fallback time.Duration // without a Feed: the next delay of looking again
	ended    bool
	// gate says the waiter holds its name's gate in the Local: the one
	// turn of this process to wait in the server for the advisory lock.
	// Without it a waiter waits in Wait for the gate, holding no
	// connection.
	gate bool
}

// gateKey is the key of the Local's lock that is the gate of name (see
// sessionWaiter.gate).
func gateKey(name string) string { return "\x00server\x00" + name }

// attempt makes an attempt on the waiter's connection (taking one if it
// has none): the grant on the row if c holds the advisory lock, else the
// first attempt; if that is refused and the request waits, the Lock
// statement starts and attempt returns once the server has queued it.
// A request that waits first takes its name's gate (see gate); while
// another waiter of the process has it, attempt is refused at once,
// without a statement.
func (w *sessionWaiter) attempt(ctx context.Context) (dlock.Grant, error) {
	s := w.s
	if err := w.prepare(ctx); err != nil {
		return dlock.Grant{}, err
	}
	sent := time.Now()
	var (
		g       dlock.Grant
		granted bool
		err     error
	)
	// A statement that writes is seen through, not interrupted by ctx:
	// a grant made on the server and lost to a cancellation would stay
	// on the row until its TTL ran out. Only a server that does not
	// answer within InterruptGrace after ctx ended is given up on (see
	// Engine.seeThrough); the connection is then discarded, which frees
	// its advisory lock.
	wctx, done := s.e.seeThrough(ctx)
	if w.locked {
		if w.sub != nil {
			w.changed = w.sub.Changed()
		}
		g, granted, err = s.e.attempt(wctx, w.c, w.req, NoSeq)
	} else {
		w.locked, g, granted, err = s.d.First(wctx, w.c, &w.info, s.e.table, w.key, w.req, ttlMillis(w.req.TTL))
	}
	err = done(err)
	if err != nil {
		w.s.discard(w.c)
		w.c, w.locked, w.marked = nil, false, false
		return dlock.Grant{}, s.e.wrap(err)
	}
	if granted {
		c := w.c
		w.c = nil
		if !w.locked {
			// Re-entered the row of a hold whose lock another connection
			// carries.
			if w.marked {
				s.discard(c)
			} else {
				giveBack(c)
			}
			w.marked = false
			g.Handle = &sessionHandle{}
			return g, nil
		}
		w.locked = false
		s.e.local.forget(w.req.Name)
		return s.newSession(w.req, w.key, c, w.info, g, sent)
	}
	// On the waiter's connection, free until the Lock statement starts:
	// a connection of the pool would stay idle beside it.
	st, err := s.e.state(ctx, w.c, w.req.Name)
	if err != nil {
		return dlock.Grant{}, s.e.wrap(err)
	}
	refused := s.e.refusal(w.req.Name, st, w.req.Owner, NoSeq)
	if w.locked {
		// The advisory lock is ours but the row is not free: its holder's
		// connection died (or it is a lease-mode holder) and its lease
		// has not run out. Wait for that by the database's clock.
		w.remaining = st.remaining
		return dlock.Grant{}, refused
	}
	if !w.req.Wait {
		return dlock.Grant{}, refused
	}
	if w.req.Fair && s.d.Mark != nil {
		if err := w.awaitMarked(ctx); err != nil {
			return dlock.Grant{}, err
		}
	}
	if err := w.startLock(ctx); err != nil {
		return dlock.Grant{}, err
	}
	return dlock.Grant{}, refused
}

// prepare takes the name's gate for a waiting request and a connection
// for the attempt, replacing one that an interruption left unusable.
func (w *sessionWaiter) prepare(ctx context.Context) error {
	s := w.s
	if w.lockCh != nil {
		return errorf(dlock.ErrNotAcquired, "still waiting in the server")
	}
	if w.req.Wait && !w.gate && !w.locked {
		if !s.e.local.tryLockWrite(gateKey(w.req.Name)) {
			// Another waiter of this process waits in the server: this
			// one waits for its turn in Wait, holding no connection.
			return errorf(dlock.ErrNotAcquired, "another waiter in this process waits for it in the server")
		}
		w.gate = true
	}
	if w.c == nil || w.interrupted {
		if w.c != nil {
			w.s.discard(w.c)
			w.c, w.interrupted = nil, false
		}
		c, info, err := s.take(ctx)
		if err != nil {
			return s.e.wrap(err)
		}
		w.c, w.info, w.locked, w.marked = c, info, false, false
	}
	return nil
}

// startLock starts the Lock statement on c. For a fair request it returns
// once the server has queued it (or it finished), so that fair waiters
// queue in the order of their Acquire calls; the order of other waiters
// does not matter, and they return at once.
func (w *sessionWaiter) startLock(ctx context.Context) error {
	s := w.s
	if w.info.ID == 0 && s.d.ConnID != nil {
		id, err := s.d.ConnID(ctx, w.c)
		if err != nil {
			return s.e.wrap(err)
		}
		w.info.ID = id
	}
	c, key, info, ttl, marked := w.c, w.key, w.info, ttlMillis(w.req.TTL), w.marked
	ch, err := s.lockAsync(w, info, func() error { return s.d.Lock(context.Background(), c, key, ttl, marked) })
	if err != nil {
		return err
	}
	w.lockCh = ch
	if !w.req.Fair || s.d.Mark != nil {
		return nil
	}
	return s.awaitQueued(ctx, ch, w.info, w.key, false)
}

// lockAsync runs lock, a waiting Lock statement on the connection info,
// in the background, where Close can interrupt it (id identifies it in
// s.waiting), and returns the channel of its result.
func (s *Sessions) lockAsync(id any, info ConnInfo, lock func() error) (chan error, error) {
	ch := make(chan error, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name)
	}
	s.waiting[id] = func() { s.interrupt(info) }
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		err := lock()
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
		ch <- err
	}()
	return ch, nil
}

// awaitMarked marks the waiter's connection as about to queue once no
// other connection marked for the name is still to queue (see
// SessionDialect.Mark), or after markWait: a process stopped between its
// mark and its Lock statement does not stall the queue for longer.
func (w *sessionWaiter) awaitMarked(ctx context.Context) error {
	s := w.s
	delay := 200 * time.Microsecond
	until := time.Now().Add(markWait)
	for {
		marked, err := s.d.Mark(ctx, w.c, w.key, time.Now().After(until))
		if err != nil {
			s.discard(w.c)
			w.c = nil
			return s.e.wrap(err)
		}
		if marked {
			w.marked = true
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
}

// markWait bounds how long a fair waiter waits for the waiters marked
// before it to queue.
const markWait = time.Second

// awaitQueued returns once the Lock statement in flight on the connection
// info (its result comes on ch) is queued in the server for key or has
// finished. pooled says to ask on a connection of the pool and give it
// back (a weighted waiter, whose grant uses the pool anyway). It asks on a connection of its own, which it
// closes afterwards rather than leave idle in the pool: a waiting process
// already holds one connection for its Lock statement, and a second one
// per process would exhaust the server's connections with many processes
// waiting for one name.
func (s *Sessions) awaitQueued(ctx context.Context, ch chan error, info ConnInfo, key any, pooled bool) error {
	var side *sql.Conn
	defer func() {
		switch {
		case side == nil:
		case pooled:
			giveBack(side)
		default:
			s.discard(side)
		}
	}()
	delay := 500 * time.Microsecond
	for {
		select {
		case err := <-ch:
			ch <- err // for Wait
			return nil
		default:
		}
		if side == nil {
			c, err := s.db.Conn(ctx)
			if err != nil {
				return s.e.wrap(err)
			}
			side = c
		}
		ok, err := s.d.Queued(ctx, side, info, key)
		if err != nil {
			return s.e.wrap(err)
		}
		if ok {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case err := <-ch:
			t.Stop()
			ch <- err
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// stopLock interrupts the Lock statement in flight and waits for it to
// end. The interrupt goes out again every lockRetry until it does: one
// that reached the server before the statement (a non-fair wait is not
// seen queued) finds nothing to stop.
func (w *sessionWaiter) stopLock() {
	w.s.stopLock(w.info, w.lockCh)
	w.lockCh = nil
}

// stopLock interrupts the Lock statement on the connection info, whose
// result comes on ch, until it ends; see sessionWaiter.stopLock.
func (s *Sessions) stopLock(info ConnInfo, ch chan error) {
	for {
		s.interrupt(info)
		t := time.NewTimer(lockRetry)
		select {
		case <-ch:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// lockRetry is how long stopLock waits for an interrupted Lock statement
// to end before it sends the interrupt again.
const lockRetry = 50 * time.Millisecond

// Wait waits in the server for the advisory lock (the Lock statement that
// the refused attempt started), or, when the connection holds it but the
// row's previous holder's lease has not run out, for that lease's end
// by the database's clock. It returns ctx.Err() when ctx is done; the
// Lock statement then keeps waiting until Cancel interrupts it.
func (w *sessionWaiter) Wait(ctx context.Context) error {
	if w.ended {
		return errEnded
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case w.lockCh == nil && !w.locked && !w.gate:
		// Wait for this process's turn to wait in the server: the waiter
		// ahead was granted or gave up.
		if err := w.s.e.local.lockWrite(ctx, gateKey(w.req.Name)); err != nil {
			return err
		}
		w.gate = true
	case w.lockCh != nil:
		select {
		case err := <-w.lockCh:
			w.lockCh = nil
			if err != nil {
				w.s.discard(w.c)
				w.c, w.marked = nil, false
				return w.s.e.wrap(err)
			}
			w.locked, w.marked = true, false
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case w.locked:
		// The row is held by another owner: a holder whose connection
		// died (or a lease-mode holder) until its lease runs out, or an
		// owner's re-entry on another Backend until it releases.
		bound := max(w.remaining, 0) + time.Millisecond
		if feed := w.s.e.local.feed; feed != nil {
			if w.sub == nil {
				sub, err := feed.Subscribe(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return w.s.e.wrap(err)
				}
				w.sub = sub
				return nil // look again, with the subscription taken first
			}
		} else {
			w.fallback = min(max(2*w.fallback, fallbackMin), fallbackMax)
			bound = min(bound, w.fallback)
		}
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Acquire makes the next attempt; see attempt.
func (w *sessionWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.ended {
		return dlock.Grant{}, errEnded
	}
	if err := w.s.e.checkOpen(); err != nil {
		return dlock.Grant{}, err
	}
	g, err := w.attempt(ctx)
	if err == nil {
		w.ended = true
		w.close()
	}
	return g, err
}

// Cancel withdraws the waiter: a Lock statement still waiting is
// interrupted, and the connection is given back to the pool only if it
// surely holds no advisory lock — otherwise it is closed, which frees a
// lock the server granted at the moment of the interrupt.
func (w *sessionWaiter) Cancel(ctx context.Context) error {
	if w.ended {
		return nil
	}
	w.ended = true
	return w.close()
}

// close ends the waiter's subscription and connection, and passes on
// its gate; see Cancel.
func (w *sessionWaiter) close() error {
	s := w.s
	if w.gate {
		defer s.e.local.unlockWrite(gateKey(w.req.Name))
		w.gate = false
	}
	if w.sub != nil {
		w.sub.Close()
		w.sub, w.changed = nil, nil
	}
	if w.lockCh != nil {
		w.interrupted = true
		w.stopLock()
		w.locked = true // it may have been granted at the same moment
	}
	c := w.c
	w.c = nil
	switch {
	case c == nil:
	case !w.locked && !w.marked:
		giveBack(c)
	case !w.locked:
		// Its mark would stay with the pool's next user.
		s.discard(c)
	case w.interrupted:
		// The interrupt may still be on its way and would hit the next
		// statement: close the connection, which frees the lock.
		s.discard(c)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.d.Unlock(ctx, c, w.key); err != nil {
			s.discard(c)
		} else {
			giveBack(c)
		}
	}
	return nil
}
