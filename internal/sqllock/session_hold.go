package sqllock

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

func handleOf(h dlock.Hold) *session {
	if sh, ok := h.Handle.(*sessionHandle); ok {
		return sh.s
	}
	return nil
}

// Renew extends the hold h to ttl from now by the database's clock. For a
// hold on a session it is one statement on the session's connection that
// also checks that the connection still holds the advisory lock; "not
// held" and any failure of the connection are a loss (the connection is
// closed). A hold without a session renews the row alone.
func (s *Sessions) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if err := s.e.checkOpen(); err != nil {
		return err
	}
	if h.Kind != dlock.KindMutex {
		return s.wrenew(ctx, h, ttl)
	}
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
	ok, err := s.d.Renew(ctx, se.c, s.e.table, se.key, h, ttlMillis(ttl))
	if err != nil || !ok {
		cause := errorf(dlock.ErrLeaseLost, "token %d: the connection holding the lock failed: %w", h.Token, err)
		if err == nil {
			cause = errorf(dlock.ErrLeaseLost, "token %d: the connection no longer holds the lock, or the row is not the hold's", h.Token)
		}
		s.kill(se, cause, true)
		se.cmu.Unlock()
		if err == nil {
			return s.e.lost(ctx, h)
		}
		return cause
	}
	se.cmu.Unlock()
	s.extend(se, sent.Add(ttl))
	return nil
}

// RenewBatch renews each hold on its own connection, concurrently; see
// [dlock.BatchRenewer].
func (s *Sessions) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, r := range rs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = s.Renew(ctx, r.Hold, r.TTL)
		}()
	}
	wg.Wait()
	return errs
}

// Release gives up one hold of h. The last hold of a session releases the
// row and the advisory lock in one statement (SessionDialect.Release) and
// gives the connection back to the pool, or closes it if it may still
// hold the lock. Other holds change the row alone.
func (s *Sessions) Release(ctx context.Context, h dlock.Hold) error {
	if err := s.e.checkOpen(); err != nil {
		return err
	}
	if h.Kind != dlock.KindMutex {
		return s.wrelease(ctx, h)
	}
	se := handleOf(h)
	if se == nil {
		return s.e.Release(ctx, h)
	}
	s.mu.Lock()
	if se.dead {
		s.mu.Unlock()
		// The connection is gone and the loss reported; free the row if it
		// is still ours, so that the next holder need not wait for it to
		// expire.
		if err := s.e.Release(ctx, h); err != nil {
			return err
		}
		return errorf(dlock.ErrLeaseLost, "token %d: the connection that held the lock was lost", h.Token)
	}
	se.refs--
	last := se.refs == 0
	if last {
		se.dead = true
		delete(s.held, se.name)
		se.timer.Stop()
	}
	s.mu.Unlock()
	if !last {
		// Holds remain: the row stays (and a DELETE tried first would
		// be a statement for nothing).
		return s.e.release(ctx, h, false)
	}
	se.cmu.Lock()
	defer se.cmu.Unlock()
	c := se.c
	se.c = nil
	if c == nil {
		return s.e.Release(ctx, h)
	}
	// Seen through like a grant (see attempt).
	sctx, done := s.e.seeThrough(ctx)
	found, unlocked, err := s.d.Release(sctx, c, s.e.table, se.key, h)
	err = done(err)
	if err != nil || !unlocked {
		s.discard(c)
	} else {
		giveBack(c)
	}
	if err != nil {
		// The connection failed; its lock is gone with it. The row may
		// still be ours: release it on the pool.
		return s.e.Release(ctx, h)
	}
	if !found {
		return s.e.lost(ctx, h)
	}
	s.e.local.signal(h.Name)
	s.e.maybeSweep(ctx)
	return nil
}

// Close closes every session's and waiter's connection (the server frees
// their advisory locks), stops the watcher and closes the engine. It does
// not release the rows of held locks; the Client releases them first.
func (s *Sessions) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.e.Close()
	}
	s.closed = true
	close(s.stop)
	var held []*session
	for _, se := range s.held {
		held = append(held, se)
	}
	for _, se := range s.wheld {
		held = append(held, se)
	}
	s.report = nil
	s.mu.Unlock()
	for _, se := range held {
		s.kill(se, errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name), false)
	}
	// The waiters' Lock statements end; their owners' Cancel closes
	// their connections (the Client cancels its waiters before it closes
	// the backend).
	s.stopLocks()
	s.bg.Wait()
	return s.e.Close()
}

// stopLocks interrupts the Lock statements in flight until none is left:
// an interrupt that reached the server before its statement stops
// nothing (see sessionWaiter.stopLock).
func (s *Sessions) stopLocks() {
	for {
		s.mu.Lock()
		var ws []func()
		for _, interrupt := range s.waiting {
			ws = append(ws, interrupt)
		}
		s.mu.Unlock()
		if len(ws) == 0 {
			return
		}
		for _, interrupt := range ws {
			interrupt()
		}
		time.Sleep(lockRetry)
	}
}
