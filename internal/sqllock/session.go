package sqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// SessionDialect is what session mode needs of a database beyond the
// lease table's [Dialect]: an advisory lock held by one connection, which
// the server frees when the connection ends, and a way to interrupt a
// connection that waits for it.
type SessionDialect struct {
	// Key returns the advisory lock's key for name in lease table table.
	Key func(table, name string) any

	// Close, if set, closes the driver connection dc (as sql.Conn.Raw
	// passes it) for good. It is needed where closing the driver
	// connection gives it back to a pool of the driver's own with its
	// session state — pgx's database/sql driver over a pgxpool.Pool — so
	// that a discarded connection cannot carry an advisory lock to the
	// pool's next user. Without it, discarding relies on database/sql
	// closing a connection reported bad.
	Close func(dc any)

	// Attach prepares a connection taken from the pool for session use:
	// it finds what Interrupt and Closed need (a backend pid, a socket)
	// without a statement where it can.
	Attach func(c *sql.Conn) (ConnInfo, error)

	// ConnID, if set, reads the server's id of c (ConnInfo.ID) when a
	// waiter needs it and Attach could not tell.
	ConnID func(ctx context.Context, c *sql.Conn) (int64, error)

	// First makes the first attempt of req on c, in one statement where
	// the database allows: try the advisory lock without waiting; if
	// taken, make the conditional grant on the lease row; if not, re-enter
	// the row if req.Owner holds it. It reports whether c now holds the
	// advisory lock, and the grant if one was made. It may fill in
	// info.ID.
	First func(ctx context.Context, c *sql.Conn, info *ConnInfo, table string, key any, req dlock.Request, ttl int64) (locked bool, g dlock.Grant, granted bool, err error)

	// Lock waits in the server until c holds the advisory lock, for a
	// hold of ttl milliseconds. It returns an error if it was interrupted
	// or c failed.
	Lock func(ctx context.Context, c *sql.Conn, key any, ttl int64) error

	// Queued reports whether the connection info waits for (or holds) the
	// advisory lock key, asked on another connection of db.
	Queued func(ctx context.Context, db *sql.DB, info ConnInfo, key any) (bool, error)

	// Renew extends h to ttl from now if c still holds the advisory lock
	// and h still holds the row, in one statement; it reports whether it
	// did.
	Renew func(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold, ttl int64) (bool, error)

	// Release gives up one hold of h on the row and releases c's advisory
	// lock, in one statement where the database allows. found says h held
	// the row; unlocked that c no longer holds the lock (and so may go
	// back to the pool).
	Release func(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold) (found, unlocked bool, err error)

	// Unlock releases c's advisory lock; it reports whether c held it.
	Unlock func(ctx context.Context, c *sql.Conn, key any) (bool, error)

	// Interrupt stops the statement that c runs (a waiting Lock), from
	// another connection of db or out of band.
	Interrupt func(ctx context.Context, db *sql.DB, info ConnInfo) error
}

// ConnInfo is what a SessionDialect knows of one session connection.
type ConnInfo struct {
	// ID is the server's id of the connection (PostgreSQL's backend pid,
	// MySQL's CONNECTION_ID()).
	ID int64
	// Cancel, if set, interrupts the connection's statement out of band.
	Cancel func(context.Context) error
	// Closed, if set, reports without a round trip whether the server has
	// closed the connection or sent it something unasked; it is only
	// called while no statement runs on it.
	Closed func() bool
}

// ParseMode parses the mode parameter of a backend's URL: "lease" (or
// empty) is lease-table mode, "session" session mode.
func ParseMode(name string) (session bool, err error) {
	switch name {
	case "lease", "":
		return false, nil
	case "session":
		return true, nil
	}
	return false, fmt.Errorf("mode %q is not \"lease\" or \"session\"", name)
}

// ParseMigrate parses the migrate parameter of a backend's URL: "true"
// (create the tables if missing) or "false" (only check them; see
// Config.NoMigrate). It returns whether the tables are only checked.
func ParseMigrate(v string) (noMigrate bool, err error) {
	create, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("migrate=%q is not true or false", v)
	}
	return !create, nil
}

// KeyHash returns the SHA-256 of table and name, from which the session
// dialects derive their advisory lock keys.
func KeyHash(table, name string) [32]byte {
	return sha256.Sum256([]byte(table + "\x00" + name))
}

// Sessions is session mode: every held lock is an advisory lock held by
// one dedicated connection of the pool, taken out of it while it carries
// the lock, plus the lease table's row, which gives the fencing token,
// keeps the reentry count and records the holder's expiry. A grant needs
// both: the advisory lock (the server's wait queue, freed when the
// connection ends) and a free or expired row (so that a holder whose
// connection died is not followed before its lease has run out by the
// database's clock). It implements [dlock.Backend], [dlock.BatchRenewer],
// [dlock.Inspector] and [dlock.LossReporter].
type Sessions struct {
	// MaxTTL, if set before first use, is the longest TTL accepted
	// (MySQL: a connection idle for wait_timeout is closed, and a holder's
	// connection is idle between renewals every TTL/3).
	MaxTTL time.Duration

	e  *Engine
	d  SessionDialect
	db *sql.DB
	bg sync.WaitGroup // timers' and watchers' work, waiters' Lock statements
	mu sync.Mutex
	// guarded by mu
	held    map[string]*session       // anchor sessions by name
	waiting map[*sessionWaiter]func() // interrupts of the Lock statements in flight
	report  func(dlock.Hold, error)
	closed  bool
	stop    chan struct{} // closes to end the watcher
}

// session is one held advisory lock and its connection.
type session struct {
	name, owner string
	token       uint64
	key         any
	info        ConnInfo

	cmu sync.Mutex // serializes statements on c
	c   *sql.Conn

	// guarded by Sessions.mu
	refs  int // holds of this Backend that ride on it
	dead  bool
	until time.Time // when the row expires at the latest, by the local clock
	timer *time.Timer
}

// sessionHandle is Grant.Handle in session mode: the session the hold
// rides on, or nil for a hold that re-entered a lock whose advisory lock
// another Backend's connection holds (it lives on the row only).
type sessionHandle struct{ s *session }

// sessionWatch is how often the watcher looks at the sockets of held
// sessions (no round trip: see ConnInfo.Closed).
const sessionWatch = 100 * time.Millisecond

// NewSessions returns session mode over e's database and lease table.
// Close closes e.
func NewSessions(e *Engine, d SessionDialect) *Sessions {
	s := &Sessions{e: e, d: d, db: e.db, held: make(map[string]*session),
		waiting: make(map[*sessionWaiter]func()), stop: make(chan struct{})}
	s.bg.Add(1)
	go s.watch()
	return s
}

var (
	_ dlock.Backend      = (*Sessions)(nil)
	_ dlock.BatchRenewer = (*Sessions)(nil)
	_ dlock.Inspector    = (*Sessions)(nil)
	_ dlock.LossReporter = (*Sessions)(nil)
)

// String describes the backend.
func (s *Sessions) String() string { return s.e.String() }

// ReportLoss registers the Client's loss handler; see [dlock.LossReporter].
func (s *Sessions) ReportLoss(handler func(dlock.Hold, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report = handler
}

// Inspect lists the held locks from the lease table; see [dlock.Inspector].
func (s *Sessions) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	return s.e.Inspect(ctx, prefix)
}

// ---------------------------------------------------------------------
// Connections.

// take takes a connection out of the pool for a session.
func (s *Sessions) take(ctx context.Context) (*sql.Conn, ConnInfo, error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, ConnInfo{}, err
	}
	info, err := s.d.Attach(c)
	if err != nil {
		s.discard(c)
		return nil, ConnInfo{}, err
	}
	return c, info, nil
}

// discard closes c instead of giving it back to the pool: the server then
// frees whatever advisory lock it held.
func (s *Sessions) discard(c *sql.Conn) {
	c.Raw(func(dc any) error {
		if s.d.Close != nil {
			s.d.Close(dc)
		}
		return driver.ErrBadConn
	})
	c.Close()
}

// giveBack returns c, which holds no advisory lock, to the pool.
func giveBack(c *sql.Conn) { c.Close() }

// ---------------------------------------------------------------------
// Acquiring.

// Acquire makes one attempt to grant req; see [dlock.Backend]. A hold of
// the same owner on this Backend re-enters on the row (one statement);
// otherwise a connection is taken from the pool and the first attempt
// (SessionDialect.First) made on it. When the lock is taken and req.Wait,
// the connection stays with the returned Waiter, which is queued in the
// server's wait queue for the advisory lock before Acquire returns.
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
	err := s.e.write(ctx, func(ctx context.Context) error {
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
	se.timer.Stop()
	report := s.report
	h := dlock.Hold{Name: se.name, Owner: se.owner, Token: se.token}
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

// ---------------------------------------------------------------------
// Holding.

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
	var ws []func()
	for _, interrupt := range s.waiting {
		ws = append(ws, interrupt)
	}
	s.report = nil
	s.mu.Unlock()
	for _, se := range held {
		s.kill(se, errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name), false)
	}
	// The waiters' Lock statements end; their owners' Cancel closes
	// their connections (the Client cancels its waiters before it closes
	// the backend).
	for _, interrupt := range ws {
		interrupt()
	}
	s.bg.Wait()
	return s.e.Close()
}

// ---------------------------------------------------------------------
// Waiting.

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
}

// attempt makes an attempt on the waiter's connection (taking one if it
// has none): the grant on the row if c holds the advisory lock, else the
// first attempt; if that is refused and the request waits, the Lock
// statement starts and attempt returns once the server has queued it.
func (w *sessionWaiter) attempt(ctx context.Context) (dlock.Grant, error) {
	s := w.s
	if w.lockCh != nil {
		return dlock.Grant{}, errorf(dlock.ErrNotAcquired, "still waiting in the server")
	}
	if w.c == nil || w.interrupted {
		if w.c != nil {
			w.s.discard(w.c)
			w.c, w.interrupted = nil, false
		}
		c, info, err := s.take(ctx)
		if err != nil {
			return dlock.Grant{}, s.e.wrap(err)
		}
		w.c, w.info, w.locked = c, info, false
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
		w.c, w.locked = nil, false
		return dlock.Grant{}, s.e.wrap(err)
	}
	if granted {
		c := w.c
		w.c = nil
		if !w.locked {
			// Re-entered the row of a hold whose lock another connection
			// carries.
			giveBack(c)
			g.Handle = &sessionHandle{}
			return g, nil
		}
		w.locked = false
		s.e.local.forget(w.req.Name)
		return s.newSession(w.req, w.key, c, w.info, g, sent)
	}
	st, err := s.e.state(ctx, &s.e.pool, w.req.Name, NoSeq)
	if err != nil {
		return dlock.Grant{}, s.e.wrap(err)
	}
	refused := s.e.refusal(w.req.Name, st, w.req.Owner)
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
	if err := w.startLock(ctx); err != nil {
		return dlock.Grant{}, err
	}
	return dlock.Grant{}, refused
}

// startLock starts the Lock statement on c and returns once the server
// has queued it (or it finished), so that waiters queue in the order of
// their Acquire calls.
func (w *sessionWaiter) startLock(ctx context.Context) error {
	s := w.s
	if w.info.ID == 0 && s.d.ConnID != nil {
		id, err := s.d.ConnID(ctx, w.c)
		if err != nil {
			return s.e.wrap(err)
		}
		w.info.ID = id
	}
	ch := make(chan error, 1)
	c, key, info, ttl := w.c, w.key, w.info, ttlMillis(w.req.TTL)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errorf(dlock.ErrClosed, "%s backend is closed", s.e.d.Name)
	}
	s.waiting[w] = func() { s.interrupt(info) }
	s.bg.Add(1)
	s.mu.Unlock()
	w.lockCh = ch
	go func() {
		defer s.bg.Done()
		err := s.d.Lock(context.Background(), c, key, ttl)
		s.mu.Lock()
		delete(s.waiting, w)
		s.mu.Unlock()
		ch <- err
	}()
	delay := 500 * time.Microsecond
	for {
		select {
		case err := <-ch:
			ch <- err // for Wait
			return nil
		default:
		}
		ok, err := s.d.Queued(ctx, s.db, w.info, key)
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

// close ends the waiter's subscription and connection; see Cancel.
func (w *sessionWaiter) close() error {
	s := w.s
	if w.sub != nil {
		w.sub.Close()
		w.sub, w.changed = nil, nil
	}
	if w.lockCh != nil {
		w.interrupted = true
		s.interrupt(w.info)
		<-w.lockCh
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
