package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

// Weighted grants in session mode: read-write locks (and semaphores of 1
// and elections) on a server whose advisory lock has a shared mode, and
// semaphores of 1 and elections on one whose lock is exclusive only; see
// the package doc's "Semaphores and read-write locks". Each holder is a
// connection of its own that holds the name's advisory lock, shared (a
// reader) or exclusive (a writer, a permit, a leader), plus a row of the
// holders table written by the lease mode's weighted transaction, which
// records the kind, gives the token, keeps the expiry and an election's
// value. The mutex's statements are not used.

// SessionWeighted is what session mode needs of a database to grant
// weighted kinds: an advisory lock with an exclusive mode, and a shared
// one (unless Exclusive), whose server queue lets no request pass a
// conflicting waiting one.
type SessionWeighted struct {
	// Exclusive says the advisory lock has no shared mode (MySQL's
	// GET_LOCK): only the kinds a writer alone holds are granted
	// (semaphores of 1, elections), shared is never asked, and Share and
	// Drop may be nil.
	Exclusive bool
	// Try tries the advisory lock key on c without waiting, shared or
	// exclusive, and sets c up for a hold of ttl milliseconds if taken.
	// It is refused while a conflicting request waits in the server.
	Try func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) (bool, error)
	// Lock waits in the server until c holds key in the mode asked, and
	// sets c up for a hold of ttl milliseconds.
	Lock func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) error
	// Held reports whether c holds key in the mode given, and sets c up
	// for a hold of ttl milliseconds more.
	Held func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) (bool, error)
	// Unlock releases c's hold of key in the mode given and the set-up
	// of a hold; it reports whether c held it.
	Unlock func(ctx context.Context, c *sql.Conn, key any, shared bool) (bool, error)
	// Share takes key shared on c, which holds it exclusive, at once:
	// ahead of every waiter (a downgrade).
	Share func(ctx context.Context, c *sql.Conn, key any) error
	// Drop releases c's exclusive hold of key alone (the set-up stays).
	Drop func(ctx context.Context, c *sql.Conn, key any) (bool, error)
}

// wkey identifies the session of a weighted hold: its name and owner.
type wkey struct{ name, owner string }

var _ dlock.Downgrader = (*Sessions)(nil)

// CanGrant implements [dlock.Granter]: read-write locks where the
// dialect has a shared advisory lock, semaphores of 1 and elections where
// it has an exclusive one (SessionDialect.Weighted), and nothing else;
// see the package doc for why.
func (s *Sessions) CanGrant(kind dlock.Kind, limit int) error {
	name, shape := s.e.d.Name, dlock.Shape(kind, limit)
	switch {
	case s.d.Weighted == nil:
		return fmt.Errorf("%w: %s in session mode grants mutexes only, not a %s: its session lock has no shared mode, so it can neither let readers share nor count permits; use lease mode", errors.ErrUnsupported, name, shape)
	case kind == dlock.KindSemaphore && limit == 1, kind == dlock.KindElection && limit == 1:
	case kind == dlock.KindRWMutex && limit == dlock.RWLimit && !s.d.Weighted.Exclusive:
	case kind == dlock.KindRWMutex && s.d.Weighted.Exclusive:
		return fmt.Errorf("%w: %s in session mode does not grant a %s: its session lock has no shared mode, so readers could not share; use lease mode", errors.ErrUnsupported, name, shape)
	case kind == dlock.KindSemaphore:
		return fmt.Errorf("%w: %s in session mode grants semaphores of 1 only, not a %s: an advisory lock is shared or exclusive and counts no permits, and a semaphore over N slot locks would wait in the server for one chosen slot rather than the first freed, so a release would not wake the first waiter; use lease mode", errors.ErrUnsupported, name, shape)
	default:
		return fmt.Errorf("%w: %s in session mode does not grant a %s", errors.ErrUnsupported, name, shape)
	}
	return s.e.CanGrant(kind, limit)
}

// Proclaim sets the value of the election hold h: on the connection that
// carries it, a check that it still holds the advisory lock, then the
// UPDATE of the holder row checked by owner, token and expiry. Only this
// connection can give up its lock (under cmu, which Proclaim holds) short
// of ending, and a statement that ran on it ran while it lived, so the
// value changes only while h holds both. A hold re-entered through
// another Backend (no connection here) changes the row alone. A
// connection that fails or no longer holds the lock is a loss.
func (s *Sessions) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	if err := s.e.checkOpen(); err != nil {
		return err
	}
	if h.Kind != dlock.KindElection {
		return errorf(dlock.ErrInvalidOption, "a %s hold has no value", h.Kind)
	}
	se := handleOf(h)
	if se == nil {
		return s.e.Proclaim(ctx, h, value)
	}
	se.cmu.Lock()
	defer se.cmu.Unlock()
	s.mu.Lock()
	left := time.Until(se.until)
	s.mu.Unlock()
	if se.c == nil || left <= 0 {
		return errorf(dlock.ErrLeaseLost, "token %d: the connection that held the lock is gone", h.Token)
	}
	// Seen through like a renewal: a cancelled Proclaim must not cost
	// the lease. The set-up stays for the rest of the lease.
	hctx, done := s.e.seeThrough(ctx)
	ok, err := s.d.Weighted.Held(hctx, se.c, se.key, se.shared, ttlMillis(left))
	if err = done(err); err != nil || !ok {
		cause := errorf(dlock.ErrLeaseLost, "token %d: the connection holding the lock failed: %w", h.Token, err)
		if err == nil {
			cause = errorf(dlock.ErrLeaseLost, "token %d: the connection no longer holds the lock", h.Token)
		}
		s.kill(se, cause, true)
		return cause
	}
	err = s.e.proclaim(ctx, se.c, h, value)
	switch {
	case err == nil:
	case errors.Is(err, dlock.ErrLeaseLost):
		// The row expired by the database's clock: the lock must go too.
		s.kill(se, err, true)
	case ctx.Err() == nil || errors.Is(err, dlock.ErrBackendUnavailable):
		// The connection failed (or was dropped, unanswered): its lock
		// is gone with it. A Proclaim whose ctx ended before its
		// statement leaves the connection as it was.
		err = errorf(dlock.ErrLeaseLost, "token %d: the connection holding the lock failed: %w", h.Token, err)
		s.kill(se, err, true)
	}
	return err
}

// wacquire is Acquire for a weighted kind: a re-entry of the owner's
// session, or an attempt on a connection of its own (see wsWaiter).
func (s *Sessions) wacquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := s.CanGrant(req.Kind, req.Limit); err != nil {
		return dlock.Grant{}, nil, errorf(dlock.ErrInvalidOption, "%w", err)
	}
	if req.Weight < 1 || req.Weight > req.Limit {
		return dlock.Grant{}, nil, errorf(dlock.ErrInvalidOption, "weight %d of a limit of %d", req.Weight, req.Limit)
	}
	if g, ok, err := s.wreenter(ctx, req); ok || err != nil {
		return g, nil, err
	}
	w := &wsWaiter{s: s, req: req, key: s.d.Key(s.e.table, req.Name), shared: req.Weight < req.Limit}
	g, err := w.attempt(ctx)
	if err == nil || !req.Wait || !errors.Is(err, dlock.ErrNotAcquired) {
		w.close()
		if err == nil {
			s.e.maybeSweep(ctx)
		}
		return g, nil, err
	}
	return dlock.Grant{}, w, err
}

// wreenter re-enters a weighted hold of req.Owner on this Backend: its
// holder row's count + 1, the new hold riding on the same session.
func (s *Sessions) wreenter(ctx context.Context, req dlock.Request) (dlock.Grant, bool, error) {
	s.mu.Lock()
	se := s.wheld[wkey{req.Name, req.Owner}]
	if se == nil || se.dead {
		s.mu.Unlock()
		return dlock.Grant{}, false, nil
	}
	if err := dlock.Conflict(se.kind, se.limit, req); err != nil {
		s.mu.Unlock()
		return dlock.Grant{}, false, err
	}
	if req.Weight > se.weight {
		s.mu.Unlock()
		return dlock.Grant{}, false, fmt.Errorf("holds %d, asks %d: %w", se.weight, req.Weight, dlock.ErrUpgrade)
	}
	se.refs++
	s.mu.Unlock()
	sent := time.Now()
	g, ok, err := s.e.wreenter(ctx, req, se.token)
	if err == nil && ok {
		g.Handle = &sessionHandle{s: se}
		s.extend(se, sent.Add(req.TTL))
		return g, true, nil
	}
	s.mu.Lock()
	se.refs--
	s.mu.Unlock()
	if err != nil {
		return dlock.Grant{}, false, s.e.wrap(err)
	}
	s.kill(se, errorf(dlock.ErrLeaseLost, "the holder row of %q expired", req.Name), false)
	return dlock.Grant{}, false, nil
}

// newWSession registers the session that c, holding the advisory lock
// (shared or not), carries for grant g of req, sent at sent.
func (s *Sessions) newWSession(req dlock.Request, key any, c *sql.Conn, info ConnInfo, shared bool, g dlock.Grant, sent time.Time) (dlock.Grant, error) {
	se := &session{name: req.Name, owner: req.Owner, token: g.Token, key: key, info: info, c: c, refs: 1,
		kind: req.Kind, limit: req.Limit, weight: req.Weight, shared: shared}
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Kind: req.Kind}
	k := wkey{req.Name, req.Owner}
	s.mu.Lock()
	old := s.wheld[k]
	switch {
	case s.closed:
		s.mu.Unlock()
		s.discard(c)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.e.Release(ctx, h)
		return dlock.Grant{}, errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name)
	case old != nil && !old.dead && old.token == g.Token:
		// A concurrent request of the same owner took a session first and
		// this one re-entered its row: ride on that session.
		old.refs++
		s.mu.Unlock()
		s.unlockConn(c, key, shared)
		s.extend(old, sent.Add(req.TTL))
		g.Handle = &sessionHandle{s: old}
		return g, nil
	case old != nil && !old.dead:
		s.mu.Unlock()
		s.discard(c)
		return dlock.Grant{}, fmt.Errorf("%s: %q is held twice by owner %s on this backend", s.e.d.Name, req.Name, show(req.Owner))
	}
	s.wheld[k] = se
	se.until = sent.Add(req.TTL)
	se.timer = time.AfterFunc(req.TTL, func() { s.expire(se) })
	s.mu.Unlock()
	g.Handle = &sessionHandle{s: se}
	return g, nil
}

// unlockConn releases c's advisory lock and gives c back to the pool, or
// closes it if that fails.
func (s *Sessions) unlockConn(c *sql.Conn, key any, shared bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, err := s.d.Weighted.Unlock(ctx, c, key, shared); err != nil || !ok {
		s.discard(c)
		return
	}
	giveBack(c)
}

// wrenew renews a weighted hold: a check on its connection that it still
// holds the advisory lock (a failure or "no" is a loss: the connection is
// closed), then the rows, as in lease mode.
func (s *Sessions) wrenew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	se := handleOf(h)
	if se == nil {
		return s.e.Renew(ctx, h, ttl)
	}
	sent := time.Now()
	se.cmu.Lock()
	if se.c == nil {
		se.cmu.Unlock()
		return errorf(dlock.ErrLeaseLost, "token %d: the connection that held the lock is gone", h.Token)
	}
	ok, err := s.d.Weighted.Held(ctx, se.c, se.key, se.shared, ttlMillis(ttl))
	if err != nil || !ok {
		cause := errorf(dlock.ErrLeaseLost, "token %d: the connection holding the lock failed: %w", h.Token, err)
		if err == nil {
			cause = errorf(dlock.ErrLeaseLost, "token %d: the connection no longer holds the lock", h.Token)
		}
		s.kill(se, cause, true)
		se.cmu.Unlock()
		return cause
	}
	se.cmu.Unlock()
	if err := s.e.Renew(ctx, h, ttl); err != nil {
		if errors.Is(err, dlock.ErrLeaseLost) {
			s.kill(se, err, false)
		}
		return err
	}
	s.extend(se, sent.Add(ttl))
	return nil
}

// wrelease gives up one hold of a weighted h: its rows as in lease mode
// and, with the session's last hold, then the advisory lock, so that a
// waiter the unlock wakes finds the rows free.
func (s *Sessions) wrelease(ctx context.Context, h dlock.Hold) error {
	se := handleOf(h)
	if se == nil {
		return s.e.Release(ctx, h)
	}
	s.mu.Lock()
	if se.dead {
		s.mu.Unlock()
		if err := s.e.Release(ctx, h); err != nil {
			return err
		}
		return errorf(dlock.ErrLeaseLost, "token %d: the connection that held the lock was lost", h.Token)
	}
	se.refs--
	last := se.refs == 0
	if last {
		se.dead = true
		if k := (wkey{se.name, se.owner}); s.wheld[k] == se {
			delete(s.wheld, k)
		}
		se.timer.Stop()
	}
	s.mu.Unlock()
	err := s.e.Release(ctx, h)
	if !last {
		return err
	}
	se.cmu.Lock()
	c, shared := se.c, se.shared
	se.c = nil
	se.cmu.Unlock()
	if c != nil {
		s.unlockConn(c, se.key, shared)
	}
	return err
}

// Downgrade lowers the weight of the weighted hold h (a writer becoming a
// reader): on its connection, the shared advisory lock is taken beside the
// exclusive one — the server grants it at once, ahead of every waiter,
// since the connection's own exclusive lock is what they wait for — then
// the holder row's weight is lowered, then the exclusive lock released. No
// other writer can come in between; the token stays. See
// [dlock.Downgrader].
func (s *Sessions) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	if err := s.e.checkOpen(); err != nil {
		return err
	}
	if h.Kind == dlock.KindMutex || weight < 1 {
		return errorf(dlock.ErrInvalidOption, "cannot downgrade a %s hold to weight %d", h.Kind, weight)
	}
	se := handleOf(h)
	if se == nil {
		return errorf(dlock.ErrInvalidOption, "token %d re-entered a hold whose connection is another Backend's: downgrade it there", h.Token)
	}
	se.cmu.Lock()
	defer se.cmu.Unlock()
	if se.c == nil {
		return errorf(dlock.ErrLeaseLost, "token %d: the connection that held the lock is gone", h.Token)
	}
	if se.shared || weight >= se.limit {
		return s.e.Downgrade(ctx, h, weight) // the rows alone: the mode stays
	}
	if s.d.Weighted.Exclusive {
		return errorf(dlock.ErrInvalidOption, "token %d: %s's session lock has no shared mode to downgrade to", h.Token, s.e.d.Name)
	}
	if err := s.d.Weighted.Share(ctx, se.c, se.key); err != nil {
		cause := errorf(dlock.ErrLeaseLost, "token %d: the connection holding the lock failed: %w", h.Token, err)
		s.kill(se, cause, true)
		return cause
	}
	if err := s.e.Downgrade(ctx, h, weight); err != nil {
		s.kill(se, err, true)
		return err
	}
	ok, err := s.d.Weighted.Drop(ctx, se.c, se.key)
	if err != nil || !ok {
		cause := errorf(dlock.ErrLeaseLost, "token %d: releasing the exclusive lock at a downgrade failed (held: %v): %v", h.Token, ok, err)
		s.kill(se, cause, true)
		return cause
	}
	se.shared = true
	s.mu.Lock()
	se.weight = weight
	s.mu.Unlock()
	return nil
}

// wsWaiter is a weighted acquisition in session mode: a connection of its
// own that tries the advisory lock and, refused, waits for it in the
// server's queue, which is strict arrival order between conflicting
// requests; then the rows. Every waiter waits in the server (no gate per
// process as for the mutex): the server's queue is the fair queue.
type wsWaiter struct {
	s      *Sessions
	req    dlock.Request
	key    any
	shared bool

	c      *sql.Conn
	info   ConnInfo
	locked bool       // c holds the advisory lock
	lockCh chan error // the result of the Lock statement in flight; nil if none
	// interrupted says an interrupt may still be on its way to c.
	interrupted bool
	// remaining is the lease left to the first holder row to expire when
	// c held the advisory lock but the rows refused the grant.
	remaining time.Duration
	fallback  time.Duration
	ended     bool
}

// attempt makes an attempt on the waiter's connection (taking one if it
// has none): the grant on the rows if c holds the advisory lock, else a
// try of it; if that is refused, the refusal the rows explain (or a
// re-entry of the owner's row held through another Backend), and for a
// waiting request the Lock statement, started and queued in the server
// before attempt returns.
func (w *wsWaiter) attempt(ctx context.Context) (dlock.Grant, error) {
	s := w.s
	if w.lockCh != nil {
		return dlock.Grant{}, errorf(dlock.ErrNotAcquired, "still waiting in the server")
	}
	if w.c == nil || w.interrupted {
		if w.c != nil {
			s.discard(w.c)
			w.c, w.interrupted = nil, false
		}
		c, info, err := s.take(ctx)
		if err != nil {
			return dlock.Grant{}, s.e.wrap(err)
		}
		w.c, w.info, w.locked = c, info, false
	}
	sent := time.Now()
	ttl := ttlMillis(w.req.TTL)
	if !w.locked {
		wctx, done := s.e.seeThrough(ctx)
		ok, err := s.d.Weighted.Try(wctx, w.c, w.key, w.shared, ttl)
		if err = done(err); err != nil {
			s.discard(w.c)
			w.c = nil
			return dlock.Grant{}, s.e.wrap(err)
		}
		w.locked = ok
	}
	if w.locked {
		req := w.req
		req.Wait = false // the server's queue is the queue: no queue row
		res, err := s.e.wattempt(ctx, req, NoSeq)
		if err != nil {
			return dlock.Grant{}, s.e.wrap(err)
		}
		if res.granted {
			c := w.c
			w.c, w.locked = nil, false
			return s.newWSession(w.req, w.key, c, w.info, w.shared, res.g, sent)
		}
		// The rows are not free although the advisory lock is ours: a
		// holder whose connection died (or a lease-mode holder) until its
		// lease runs out by the database's clock.
		w.remaining = 0
		var he *dlock.HeldError
		if errors.As(res.refused, &he) {
			w.remaining = he.Holder.TTL
		}
		return dlock.Grant{}, res.refused
	}
	refused, mine := s.e.wrefusal(ctx, w.req)
	if mine {
		g, ok, err := s.e.wreenter(ctx, w.req, 0)
		if err != nil {
			return dlock.Grant{}, s.e.wrap(err)
		}
		if ok {
			// Re-entered the row of the owner's hold whose lock another
			// Backend's connection carries.
			giveBack(w.c)
			w.c = nil
			g.Handle = &sessionHandle{}
			return g, nil
		}
	}
	if !w.req.Wait || !errors.Is(refused, dlock.ErrNotAcquired) {
		return dlock.Grant{}, refused
	}
	if err := w.startLock(ctx); err != nil {
		return dlock.Grant{}, err
	}
	return dlock.Grant{}, refused
}

// startLock starts the Lock statement and returns once the server has
// queued it (or it finished): waiters queue in the order of their Acquire
// calls.
func (w *wsWaiter) startLock(ctx context.Context) error {
	s := w.s
	if w.info.ID == 0 && s.d.ConnID != nil {
		id, err := s.d.ConnID(ctx, w.c)
		if err != nil {
			return s.e.wrap(err)
		}
		w.info.ID = id
	}
	c, key, shared, ttl := w.c, w.key, w.shared, ttlMillis(w.req.TTL)
	ch, err := s.lockAsync(w, w.info, func() error { return s.d.Weighted.Lock(context.Background(), c, key, shared, ttl) })
	if err != nil {
		return err
	}
	w.lockCh = ch
	return s.awaitQueued(ctx, ch, w.info, w.key, true)
}

// Wait waits in the server for the advisory lock, or, when the
// connection holds it but the rows are not free, for the first holder
// row's expiry by the database's clock (looking again at an interval
// that backs off meanwhile: a row-only re-entry may end sooner).
func (w *wsWaiter) Wait(ctx context.Context) error {
	if w.ended {
		return errEnded
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case w.lockCh != nil:
		select {
		case err := <-w.lockCh:
			w.lockCh = nil
			if err != nil {
				w.s.discard(w.c)
				w.c = nil
				return w.s.e.wrap(err)
			}
			w.locked = true
		case <-ctx.Done():
			return ctx.Err()
		}
	case w.locked:
		w.fallback = min(max(2*w.fallback, fallbackMin), fallbackMax)
		t := time.NewTimer(min(max(w.remaining, 0)+time.Millisecond, w.fallback))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Acquire makes the next attempt; see attempt.
func (w *wsWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
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
// interrupted, and the connection given back to the pool only if it
// surely holds no advisory lock.
func (w *wsWaiter) Cancel(ctx context.Context) error {
	if w.ended {
		return nil
	}
	w.ended = true
	return w.close()
}

// close ends the waiter's connection; see Cancel.
func (w *wsWaiter) close() error {
	s := w.s
	if w.lockCh != nil {
		w.interrupted = true
		s.stopLock(w.info, w.lockCh)
		w.lockCh = nil
		w.locked = true // it may have been granted at the same moment
	}
	c := w.c
	w.c = nil
	switch {
	case c == nil:
	case !w.locked:
		giveBack(c)
	case w.interrupted:
		s.discard(c) // the interrupt may still be on its way
	default:
		s.unlockConn(c, w.key, w.shared)
	}
	return nil
}

// wreenter re-enters req.Owner's live holder row of req.Name (of token,
// unless 0) without an advisory lock: count + 1, same token, the expiry
// extended. It reports false if the owner has no such row; more weight
// than the row holds is dlock.ErrUpgrade, another kind or limit than the
// name's a dlock.ConflictError.
func (e *Engine) wreenter(ctx context.Context, req dlock.Request, token uint64) (dlock.Grant, bool, error) {
	ttl := ttlMillis(req.TTL)
	var (
		g  dlock.Grant
		ok bool
	)
	q := Bind(e.d, e.table)(`SELECT weight, holds, token FROM ` + HoldersTable(e.table) + ` WHERE name = ? AND owner = ? AND expires_at > {NOW}`)
	err := e.writeName(ctx, req.Name, func(ctx context.Context) error {
		ok = false
		return e.tx(ctx, func(c *sql.Conn) error {
			if err := e.begin(ctx, c); err != nil {
				return err
			}
			if e.d.ConcurrentWrites {
				if _, err := c.ExecContext(ctx, e.w.lockBucket, req.Name); err != nil {
					return err
				}
			}
			var (
				r   rawRow
				now int64
			)
			found, err := queryOne(ctx, c, e.w.lease, []any{req.Name}, &r.owner, &r.token, &r.holds, &r.expires, &now)
			if err != nil || !found || !isMark(r.owner) {
				return err
			}
			kind, limit, okM := parseMark(r.owner)
			if !okM {
				return e.foreign(req.Name, "owner "+show(r.owner)+" starts as dlock's mark of a weighted name but is not one")
			}
			var weight, holds int
			var tok int64
			found, err = queryOne(ctx, c, q, []any{req.Name, req.Owner}, &weight, &holds, &tok)
			if err != nil || !found || token != 0 && uint64(tok) != token {
				return err
			}
			if err := dlock.Conflict(kind, limit, req); err != nil {
				return err
			}
			if req.Weight > weight {
				return fmt.Errorf("holds %d, asks %d: %w", weight, req.Weight, dlock.ErrUpgrade)
			}
			if _, err := c.ExecContext(ctx, e.w.reenter, ttl, req.Name, req.Owner); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, e.w.renewLease, ttl, req.Name, tok); err != nil {
				return err
			}
			g, ok = dlock.Grant{Token: uint64(tok), Count: holds + 1}, true
			return nil
		})
	})
	return g, ok, err
}

// wrefusal is the refusal of a weighted req whose advisory lock is held
// by others, as the rows explain it: a kind or limit other than the
// name's (a *dlock.ConflictError, not to be waited for), or the holders.
// mine says req.Owner is one of them (through another Backend: see
// wreenter).
func (e *Engine) wrefusal(ctx context.Context, req dlock.Request) (refused error, mine bool) {
	st, err := e.state(ctx, &e.pool, req.Name)
	switch {
	case err != nil:
		return e.wrap(err), false
	case st.fault != "":
		return e.foreign(req.Name, st.fault), false
	case isMark(st.owner):
		kind, limit, ok := parseMark(st.owner)
		if !ok {
			return e.foreign(req.Name, "owner "+show(st.owner)+" starts as dlock's mark of a weighted name but is not one"), false
		}
		if st.remaining > 0 {
			if err := dlock.Conflict(kind, limit, req); err != nil {
				return err, false
			}
		}
	case st.owner != "" && st.holds > 0 && st.remaining > 0:
		return dlock.Conflict(dlock.KindMutex, 1, req), false
	}
	q := Bind(e.d, e.table)(`SELECT owner, weight, token, expires_at - {NOW} FROM ` + HoldersTable(e.table) +
		` WHERE name = ? AND expires_at > {NOW} ORDER BY expires_at`)
	rows, err := e.pool.QueryContext(ctx, q, req.Name)
	if err != nil {
		return e.wrap(err), false
	}
	defer rows.Close()
	he := &dlock.HeldError{}
	used := 0
	for rows.Next() {
		var (
			owner       string
			weight      int
			token, left int64
		)
		if err := rows.Scan(&owner, &weight, &token, &left); err != nil {
			return e.wrap(err), false
		}
		mine = mine || owner == req.Owner
		if used == 0 {
			he.Holder = dlock.Holder{Owner: owner, Token: uint64(token), TTL: time.Duration(left) * time.Millisecond}
		}
		used += max(weight, 1)
	}
	if err := rows.Err(); err != nil {
		return e.wrap(err), false
	}
	if used == 0 {
		return errorf(dlock.ErrNotAcquired, "its advisory lock is held or waited for in the server"), mine
	}
	if req.Limit > 1 {
		he.Held, he.Limit = used, req.Limit
	}
	return he, mine
}
