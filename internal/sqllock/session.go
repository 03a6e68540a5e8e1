package sqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
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
	// hold of ttl milliseconds, and then drops c's mark (see Mark) if
	// marked. It returns an error if it was interrupted or c failed.
	Lock func(ctx context.Context, c *sql.Conn, key any, ttl int64, marked bool) error

	// Mark, if set, orders fair waiters without a second connection. It
	// is called on a fair waiter's connection c before its Lock
	// statement, and marks c as about to queue for key, in a way that
	// every connection sees at once, unless (and force is false) another
	// connection marked for key has not yet queued; it reports whether
	// it marked c. The waiter queues once it is marked, so it queues
	// after every fair waiter whose Acquire returned before its own
	// began. Without Mark, a fair waiter confirms with Queued, on a
	// connection of its own, that the server has queued its Lock
	// statement before Acquire returns.
	Mark func(ctx context.Context, c *sql.Conn, key any, force bool) (marked bool, err error)

	// Queued reports whether the connection info waits for (or holds) the
	// advisory lock key, asked on another connection, c.
	Queued func(ctx context.Context, c *sql.Conn, info ConnInfo, key any) (bool, error)

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

	// Weighted, if set, grants read-write locks (and semaphores of 1) in
	// session mode: see session_weighted.go. Without it session mode
	// grants mutexes only.
	Weighted *SessionWeighted
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
	held    map[string]*session // anchor sessions by name
	wheld   map[wkey]*session   // sessions of weighted holds (session_weighted.go)
	waiting map[any]func()      // interrupts of the Lock statements in flight
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
	kind        dlock.Kind // of a weighted hold (see session_weighted.go); KindMutex for the mutex
	limit       int
	// shared says c holds the advisory lock in shared mode (a reader).
	// Guarded by cmu.
	shared bool
	weight int // guarded by Sessions.mu

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
	s := &Sessions{e: e, d: d, db: e.db, held: make(map[string]*session), wheld: make(map[wkey]*session),
		waiting: make(map[any]func()), stop: make(chan struct{})}
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
