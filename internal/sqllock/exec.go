package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// wrap classifies a database error for the Client: unavailable stores
// match dlock.ErrBackendUnavailable.
func (e *Engine) wrap(err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{dlock.ErrBackendUnavailable, dlock.ErrClosed, dlock.ErrLeaseLost,
		dlock.ErrNotAcquired, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, known) {
			return err
		}
	}
	switch e.classify(err) {
	case Retry, Unavailable:
		return errorf(dlock.ErrBackendUnavailable, "%w", err)
	}
	return err
}

func (e *Engine) classify(err error) ErrorClass {
	if e.d.Classify != nil {
		return e.d.Classify(err)
	}
	return ClassifyCommon(err)
}

// InterruptGrace is how long after its caller's context ended a
// statement of an [Dialect.Interruptible] dialect may still run before it
// is interrupted: half of [dlock.CancelGrace], so that the engine returns
// before the Client stops waiting for it.
const InterruptGrace = dlock.CancelGrace / 2

// seeThrough returns the context for a statement under ctx. It is not
// cancelled with ctx: a write that was sent is seen through, so that its
// outcome is known and a grant is never made in the store and then lost to
// a cancellation. But on an Interruptible dialect it ends InterruptGrace
// after ctx, so that a server that stopped answering (a link gone silent
// after the statement was sent) holds the caller no longer: the driver
// drops the connection, the server rolls back what it had not committed,
// and a grant it had committed stays until its TTL.
func (e *Engine) seeThrough(ctx context.Context) (context.Context, func(error) error) {
	if !e.d.Interruptible || ctx.Done() == nil {
		return context.WithoutCancel(ctx), func(err error) error { return err }
	}
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
		ended bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			timer = time.AfterFunc(InterruptGrace, func() { cancel(errNoAnswer) })
		}
	})
	// done ends the statement's context and says why a failed statement
	// failed: a server that did not answer in time is unavailable.
	return sctx, func(err error) error {
		stop()
		mu.Lock()
		ended = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(nil)
		if err != nil && context.Cause(sctx) == errNoAnswer {
			return errorf(dlock.ErrBackendUnavailable, "no answer %v after the context ended (%w); the connection was dropped: %v",
				InterruptGrace, ctx.Err(), err)
		}
		return err
	}
}

// errNoAnswer is the cause of a statement interrupted by seeThrough.
var errNoAnswer = errors.New("no answer in time")

// retry runs fn until it returns anything but a Retry error, backing off
// in between, or until ctx is done.
//
// fn gets a context that is not cancelled with ctx (see seeThrough): ctx
// is checked before and between attempts, but interrupts a statement only
// on an Interruptible dialect, InterruptGrace after it ended. Interrupting
// SQLite leaves the connection marked unusable, so database/sql discards
// it — which costs a reconnect and its prepared statements, and loses an
// in-memory database; the database's busy timeout bounds a statement
// there instead.
func (e *Engine) retry(ctx context.Context, fn func(context.Context) error) error {
	backoff := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		sctx, done := e.seeThrough(ctx)
		err := done(fn(sctx))
		if err == nil || e.classify(err) != Retry {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(e.wrap(err), ctx.Err())
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

// write runs fn, which writes rows of many names (or none), retrying busy
// errors until ctx is done (see retry); unless the dialect has
// ConcurrentWrites, under the process's write lock.
func (e *Engine) write(ctx context.Context, fn func(context.Context) error) error {
	if e.d.ConcurrentWrites {
		return e.retry(ctx, fn)
	}
	return e.writeName(ctx, "", fn)
}

// writeName is write for fn that writes the rows of one name: under the
// process's write lock, or with ConcurrentWrites under the name's, so
// that the writes of one name wait their turn here rather than each on
// the name's row in the database, holding a connection (a herd of
// waiters in one process would otherwise take a connection each).
func (e *Engine) writeName(ctx context.Context, name string, fn func(context.Context) error) error {
	return e.retry(ctx, func(dctx context.Context) error {
		key := name
		if !e.d.ConcurrentWrites {
			key = "" // one lock for all
		}
		if err := e.local.lockWrite(ctx, key); err != nil {
			return err
		}
		defer e.local.unlockWrite(key)
		return fn(dctx)
	})
}

// tx runs fn in a transaction begun with the dialect's Begin on one
// connection, and commits it; on any error it rolls back. A connection
// whose rollback fails is discarded rather than given back mid-transaction.
func (e *Engine) tx(ctx context.Context, fn func(*sql.Conn) error) (err error) {
	c, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, e.d.Begin); err != nil {
		return err
	}
	if err := fn(c); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := c.ExecContext(rctx, "ROLLBACK"); rerr != nil {
			c.Raw(func(any) error { return driver.ErrBadConn })
		}
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := c.ExecContext(rctx, "ROLLBACK"); rerr != nil {
			c.Raw(func(any) error { return driver.ErrBadConn })
		}
		return err
	}
	return nil
}

// querier is a pool or a *sql.Conn (in a transaction).
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// pool runs statements on the engine's *sql.DB through prepared statements,
// made on first use and kept until Close: the engine runs a handful of
// statements very often, and parsing them each time would cost more than
// running them.
type pool struct {
	db    *sql.DB
	stmts *sync.Map // query → *sql.Stmt
	mu    sync.Mutex
	// lend, if set, borrows the Feed's listening connection while it is
	// idle: a statement runs there first, and on the pool only when it is
	// busy (see Lender).
	lend func() (*sql.Conn, func(), bool)
}

// borrow returns the Feed's listening connection and the function that
// gives it back, if it can be lent now.
func (p *pool) borrow() (*sql.Conn, func(), bool) {
	if p.lend == nil {
		return nil, nil, false
	}
	return p.lend()
}

func (p *pool) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	p.stmts.Store(query, st)
	return st, nil
}

func (p *pool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if c, giveBack, ok := p.borrow(); ok {
		defer giveBack()
		return c.ExecContext(ctx, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (p *pool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (p *pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	p.stmts.Range(func(k, st any) bool {
		errs = append(errs, st.(*sql.Stmt).Close())
		p.stmts.Delete(k)
		return true
	})
	return errors.Join(errs...)
}

// queryOne runs a query that returns at most one row and scans it into
// dest. It reads the result to its end, so that the errors of a statement
// that writes (and, outside a transaction, commits when it ends) are seen.
func queryOne(ctx context.Context, q querier, query string, args []any, dest ...any) (bool, error) {
	if p, ok := q.(*pool); ok {
		if c, giveBack, ok := p.borrow(); ok {
			defer giveBack()
			q = c
		}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	found := false
	for rows.Next() {
		if !found {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return false, err
			}
			found = true
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return false, err
	}
	return found, rows.Close()
}
