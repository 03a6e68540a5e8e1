package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

// Acquire makes one attempt to grant req; see [dlock.Backend]. A hold of
// the same owner on this Backend re-enters on the row (one statement);
// otherwise a connection is taken from the pool and the first attempt
// (SessionDialect.First) made on it. When the lock is taken and req.Wait,
// the connection stays with the returned Waiter, whose Lock statement
// waits in the server's queue for the advisory lock; a fair one queues
// after the fair waiters whose Acquire returned before (see
// SessionDialect.Mark and Queued).
func (s *Sessions) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := s.e.checkOpen(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if err := checkRequest(req); err != nil {
		return dlock.Grant{}, nil, err
	}
	if s.MaxTTL > 0 && req.TTL > s.MaxTTL {
		return dlock.Grant{}, nil, errorf(dlock.ErrInvalidOption, "TTL %v is above %v, the longest that session mode on %s allows (raise wait_timeout)", req.TTL, s.MaxTTL, s.e.desc)
	}
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if req.Kind != dlock.KindMutex {
		return s.wacquire(ctx, req)
	}
	if g, ok, err := s.reenter(ctx, req); ok || err != nil {
		return g, nil, err
	}
	w := &sessionWaiter{s: s, req: req, key: s.d.Key(s.e.table, req.Name)}
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

// reenter re-enters a lock that this Backend holds for req.Owner: one
// statement on the row; the new hold rides on the same session.
func (s *Sessions) reenter(ctx context.Context, req dlock.Request) (dlock.Grant, bool, error) {
	s.mu.Lock()
	se := s.held[req.Name]
	if se == nil || se.owner != req.Owner || se.dead {
		s.mu.Unlock()
		return dlock.Grant{}, false, nil
	}
	se.refs++
	s.mu.Unlock()
	sent := time.Now()
	var (
		g  dlock.Grant
		ok bool
	)
	err := s.e.writeName(ctx, req.Name, func(ctx context.Context) error {
		var err error
		g, ok, err = s.e.attempt(ctx, &s.e.pool, req, NoSeq)
		return err
	})
	if err == nil && ok {
		if g.Count == 1 {
			// The last other hold was released meanwhile and the row was
			// taken over afresh, on the advisory lock se still holds.
			s.mu.Lock()
			se.token = g.Token
			s.mu.Unlock()
		}
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
	// The row is not ours any more: the session is lost.
	s.kill(se, errorf(dlock.ErrLeaseLost, "the lease row of %q expired", req.Name), false)
	return dlock.Grant{}, false, nil
}

// newSession registers the session that c, holding the advisory lock,
// carries for grant g of req, sent at sent.
func (s *Sessions) newSession(req dlock.Request, key any, c *sql.Conn, info ConnInfo, g dlock.Grant, sent time.Time) (dlock.Grant, error) {
	se := &session{name: req.Name, owner: req.Owner, token: g.Token, key: key, info: info, c: c, refs: 1}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.discard(c)
		// Free the row granted a moment ago rather than leave it to its TTL.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.e.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token})
		return dlock.Grant{}, errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name)
	}
	if old := s.held[req.Name]; old != nil && !old.dead {
		// Cannot happen while the advisory lock is exclusive; keep the
		// old one reachable for its own release.
		s.mu.Unlock()
		s.discard(c)
		return dlock.Grant{}, fmt.Errorf("%s: %q is held twice by this backend", s.e.d.Name, req.Name)
	}
	s.held[req.Name] = se
	se.until = sent.Add(req.TTL)
	se.timer = time.AfterFunc(req.TTL, func() { s.expire(se) })
	s.mu.Unlock()
	g.Handle = &sessionHandle{s: se}
	return g, nil
}

// extend records that se's row lives until at least until.
func (s *Sessions) extend(se *session, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se.dead || !until.After(se.until) {
		return
	}
	se.until = until
	se.timer.Reset(time.Until(until))
}

// expire ends a session whose row has expired without a renewal: its
// connection must not keep the advisory lock.
func (s *Sessions) expire(se *session) {
	s.mu.Lock()
	if se.dead || time.Now().Before(se.until) {
		if !se.dead {
			se.timer.Reset(time.Until(se.until))
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.kill(se, errorf(dlock.ErrLeaseLost, "not renewed before its TTL ran out"), false)
}

// kill ends session se for cause: it is taken out of the held sessions,
// its connection closed (which frees the advisory lock on the server) and
// its holds reported lost. locked says the caller holds se.cmu.
func (s *Sessions) kill(se *session, cause error, locked bool) {
	s.mu.Lock()
	if se.dead {
		s.mu.Unlock()
		return
	}
	se.dead = true
	if s.held[se.name] == se {
		delete(s.held, se.name)
	}
	if k := (wkey{se.name, se.owner}); s.wheld[k] == se {
		delete(s.wheld, k)
	}
	se.timer.Stop()
	report := s.report
	h := dlock.Hold{Name: se.name, Owner: se.owner, Token: se.token, Kind: se.kind}
	s.mu.Unlock()
	if !locked {
		se.cmu.Lock()
	}
	if se.c != nil {
		s.discard(se.c)
		se.c = nil
	}
	if !locked {
		se.cmu.Unlock()
	}
	if report != nil {
		report(h, cause)
	}
}

// watch looks at the sockets of the held sessions every sessionWatch and
// ends those the server closed (pg_terminate_backend, a shutdown), so
// that their loss is reported before the next renewal.
func (s *Sessions) watch() {
	defer s.bg.Done()
	t := time.NewTicker(sessionWatch)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var check []*session
		for _, se := range s.held {
			if se.info.Closed != nil {
				check = append(check, se)
			}
		}
		for _, se := range s.wheld {
			if se.info.Closed != nil {
				check = append(check, se)
			}
		}
		s.mu.Unlock()
		for _, se := range check {
			if !se.cmu.TryLock() {
				continue // a statement runs on it
			}
			if se.c != nil && se.info.Closed() {
				s.kill(se, errorf(dlock.ErrLeaseLost, "the server closed the connection that held the lock"), true)
			}
			se.cmu.Unlock()
		}
	}
}

// interrupt sends the interrupt of the Lock statement on the connection
// info: a cancel request out of band, or KILL QUERY from another
// connection. An interrupt that does not go out is not an error: the
// connection is closed afterwards anyway, which ends the wait on the
// server's side.
func (s *Sessions) interrupt(info ConnInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if info.Cancel != nil {
		info.Cancel(ctx)
	} else if s.d.Interrupt != nil {
		s.d.Interrupt(ctx, s.db, info)
	}
}
