package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

// Config configures an Engine.
type Config struct {
	// Table is the lease table's name (default [DefaultTable]); the
	// waiters table is named after it. See [CheckTable].
	Table string

	// WaiterTimeout is how long a fair waiter's queue entry lives without
	// a heartbeat; a waiter refreshes it every third of that while it
	// waits. A waiter whose process died holds up those behind it for at
	// most this long. Default [DefaultWaiterTimeout]; minimum
	// [MinWaiterTimeout].
	WaiterTimeout time.Duration

	// Desc describes the backend for String, e.g. "sqlite /var/lib/x.db".
	Desc string

	// Local is the in-process state shared with the other engines of this
	// process on the same store, with its Feed; its owner closes it. nil
	// gives the engine a Local of its own, with Feed, which Close closes.
	Local *Local

	// Feed reports changes committed by other connections (processes),
	// when Local is nil. nil: waiters look at the lock's state again at a
	// backing-off interval (5 ms to 100 ms) instead.
	Feed Feed

	// OnClose, if set, is called by Close after the engine has stopped,
	// to release what the backend opened for it.
	OnClose func() error

	// NoMigrate makes New check that the tables exist (see [Check])
	// instead of creating them.
	NoMigrate bool
}

// Defaults and limits of Config.
const (
	// DefaultWaiterTimeout is Config.WaiterTimeout when it is zero.
	DefaultWaiterTimeout = 5 * time.Second
	// MinWaiterTimeout is the least Config.WaiterTimeout: a waiter must be
	// able to refresh its row several times within it.
	MinWaiterTimeout = 300 * time.Millisecond
)

// Engine is a dlock backend on a lease table: it implements
// [dlock.Backend], [dlock.BatchRenewer] and [dlock.Inspector]. It is safe
// for concurrent use.
type Engine struct {
	db       *sql.DB
	d        Dialect
	table    string
	desc     string
	q        statements
	local    *Local
	ownLocal bool
	wttl     time.Duration
	onClose  func() error

	pool pool // e.db through prepared statements

	ops     atomic.Uint64 // acquisitions and releases, for the sweep's turn
	backlog atomic.Bool   // the last sweep deleted a full batch

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ dlock.Backend      = (*Engine)(nil)
	_ dlock.BatchRenewer = (*Engine)(nil)
	_ dlock.Inspector    = (*Engine)(nil)
)

// New returns an Engine on db, creating the tables (see [Migrate]), or
// under cfg.NoMigrate checking that they exist (see [Check]). ctx bounds
// that. On error nothing is closed: the
// caller still owns db and cfg.Feed.
func New(ctx context.Context, db *sql.DB, d Dialect, cfg Config) (*Engine, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if err := CheckTable(cfg.Table); err != nil {
		return nil, err
	}
	switch {
	case cfg.WaiterTimeout == 0:
		cfg.WaiterTimeout = DefaultWaiterTimeout
	case cfg.WaiterTimeout < MinWaiterTimeout:
		return nil, errorf(dlock.ErrInvalidOption, "waiter timeout %v is below the minimum %v", cfg.WaiterTimeout, MinWaiterTimeout)
	}
	if cfg.Desc == "" {
		cfg.Desc = d.Name
	}
	e := &Engine{
		db: db, d: d, table: cfg.Table, desc: cfg.Desc,
		q:     newStatements(d, cfg.Table),
		local: cfg.Local, wttl: cfg.WaiterTimeout, onClose: cfg.OnClose,
	}
	if e.local == nil {
		e.local, e.ownLocal = NewLocal(cfg.Feed), true
	}
	e.pool = pool{db: db, stmts: new(sync.Map)}
	migrate := Migrate
	if cfg.NoMigrate {
		migrate = Check
	}
	if err := migrate(ctx, db, d, cfg.Table); err != nil {
		return nil, err
	}
	return e, nil
}

// String describes the backend.
func (e *Engine) String() string { return e.desc }

// Table returns the lease table's name.
func (e *Engine) Table() string { return e.table }

// Migrate runs [Migrate] for the engine's tables; see [dlock.Migrator].
func (e *Engine) Migrate(ctx context.Context) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	if err := Migrate(ctx, e.db, e.d, e.table); err != nil {
		return fmt.Errorf("%s: %w", e.desc, err)
	}
	return nil
}

// Close closes its own Local (and so the Feed) if Config.Local was nil,
// and calls Config.OnClose. Later calls of other
// methods return errors matching [dlock.ErrClosed]. It does not close db.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		var errs []error
		if e.ownLocal {
			errs = append(errs, e.local.Close())
		}
		errs = append(errs, e.pool.close())
		if e.onClose != nil {
			errs = append(errs, e.onClose())
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

func (e *Engine) checkOpen() error {
	if e.closed.Load() {
		return errorf(dlock.ErrClosed, "%s backend is closed", e.d.Name)
	}
	return nil
}

// ---------------------------------------------------------------------
// Running statements.

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

// write runs fn, which writes, under the process's write lock, retrying
// busy errors until ctx is done; see retry.
func (e *Engine) write(ctx context.Context, fn func(context.Context) error) error {
	return e.retry(ctx, func(dctx context.Context) error {
		if err := e.local.lockWrite(ctx); err != nil {
			return err
		}
		defer e.local.unlockWrite()
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

// ---------------------------------------------------------------------
// Acquiring.

// NoSeq is the queue position of a request that is not in the fair queue:
// behind every queued waiter.
const NoSeq = math.MaxInt64

// ttlMillis converts a TTL to whole milliseconds, rounding up, without
// overflow.
func ttlMillis(d time.Duration) int64 {
	return max(dur.Ceil(d, time.Millisecond), 1)
}

func checkRequest(req dlock.Request) error {
	switch {
	case req.Name == "":
		return errorf(dlock.ErrInvalidName, "empty name")
	case req.Owner == "":
		return errorf(dlock.ErrInvalidOption, "empty owner")
	case req.TTL <= 0:
		return errorf(dlock.ErrInvalidOption, "TTL %v is not positive", req.TTL)
	}
	return nil
}

// attempt makes one conditional grant of req for a requester at queue
// position seq, on q (the pool, or a connection in a transaction).
func (e *Engine) attempt(ctx context.Context, q querier, req dlock.Request, seq int64) (dlock.Grant, bool, error) {
	ttl := ttlMillis(req.TTL)
	if e.d.Attempt != nil {
		return e.d.Attempt(ctx, q, e.table, req, ttl, seq)
	}
	var g dlock.Grant
	if e.d.Returning {
		args := append(NewRowArgs(req.Name, req.Owner, ttl, seq), SetArgs(req.Owner, ttl)...)
		args = append(args, CondArgs(req.Owner, req.Name, seq)...)
		ok, err := queryOne(ctx, q, e.q.upsert, args, &g.Token, &g.Count)
		return g, ok, err
	}
	// Without RETURNING: make sure the row exists, update it on the same
	// conditions, read the result — in one transaction.
	run := func(c querier) (bool, error) {
		if _, err := c.ExecContext(ctx, e.q.ensure, req.Name, req.Name, req.Name, seq); err != nil {
			return false, err
		}
		args := append(SetArgs(req.Owner, ttl), req.Name)
		args = append(args, CondArgs(req.Owner, req.Name, seq)...)
		res, err := c.ExecContext(ctx, e.q.update, args...)
		if err != nil {
			return false, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return false, err
		}
		return queryOne(ctx, c, e.q.granted, []any{req.Name}, &g.Token, &g.Count)
	}
	if c, ok := q.(*sql.Conn); ok {
		ok, err := run(c)
		return g, ok, err
	}
	var ok bool
	err := e.tx(ctx, func(c *sql.Conn) error {
		var err error
		ok, err = run(c)
		return err
	})
	return g, ok, err
}

// lockState is a lock's state as the database saw it.
type lockState struct {
	exists    bool
	owner     string
	token     uint64
	holds     int
	remaining time.Duration // of the holder's lease; <= 0 when expired
	ahead     int           // live fair waiters queued before the asker
	aheadTTL  time.Duration // remaining life of the first of them to expire
	fault     string        // what makes the row (or its waiter rows) foreign data; "" if none
}

// held reports whether another owner than owner holds the lock.
func (s lockState) heldByOther(owner string) bool {
	return s.exists && s.owner != "" && s.holds > 0 && s.remaining > 0 && s.owner != owner
}

// heldBy reports whether owner holds the lock.
func (s lockState) heldBy(owner string) bool {
	return s.exists && s.owner == owner && s.holds > 0 && s.remaining > 0
}

// mayAcquire reports whether an attempt by owner at queue position seq
// could succeed.
func (s lockState) mayAcquire(owner string) bool {
	return s.fault == "" && (s.heldBy(owner) || !s.heldByOther(owner) && s.ahead == 0)
}

func (e *Engine) state(ctx context.Context, q querier, name string, seq int64) (lockState, error) {
	var (
		s        lockState
		r        rawRow
		now      int64
		aheadExp sql.NullInt64
	)
	// The columns are read as stored and checked here (see RowOK), so that
	// a row dlock did not write is reported, not a Scan error.
	var exists int64
	ok, err := queryOne(ctx, q, e.q.state, []any{seq, seq, name},
		&r.owner, &r.token, &r.holds, &r.expires, &now, &s.ahead, &aheadExp, &r.badWaiters, &exists)
	if err != nil || !ok {
		return lockState{}, err
	}
	s.exists = exists == 1
	s.fault = e.checkRow(r, now, &s)
	if aheadExp.Valid {
		s.aheadTTL = time.Duration(aheadExp.Int64-now) * time.Millisecond
	}
	return s, nil
}

// refusal is the error of an attempt on name refused in state s.
func (e *Engine) refusal(name string, s lockState, owner string) error {
	if s.fault != "" {
		return e.foreign(name, s.fault)
	}
	if s.heldByOther(owner) {
		return &dlock.HeldError{Holder: dlock.Holder{Owner: s.owner, Token: s.token, TTL: s.remaining}}
	}
	if s.ahead > 0 {
		return errorf(dlock.ErrNotAcquired, "free, but %d fair waiter(s) are queued first", s.ahead)
	}
	return errorf(dlock.ErrNotAcquired, "taken and released by others meanwhile")
}

// try makes the attempts of a request that is not in the fair queue: when
// an attempt is refused but the state read right after says the lock is
// free, it tries again (a few times), so that a refusal comes with the
// holder that caused it. It returns that state with the refusal.
func (e *Engine) try(ctx context.Context, req dlock.Request) (dlock.Grant, lockState, error) {
	var s lockState
	for range 3 {
		var (
			g  dlock.Grant
			ok bool
		)
		err := e.write(ctx, func(ctx context.Context) error {
			var err error
			g, ok, err = e.attempt(ctx, &e.pool, req, NoSeq)
			return err
		})
		if err != nil {
			return dlock.Grant{}, s, e.wrap(err)
		}
		if ok {
			e.local.forget(req.Name)
			e.maybeSweep(ctx)
			return g, s, nil
		}
		err = e.retry(ctx, func(ctx context.Context) error {
			var err error
			s, err = e.state(ctx, &e.pool, req.Name, NoSeq)
			return err
		})
		if err != nil {
			return dlock.Grant{}, s, e.wrap(err)
		}
		if !s.mayAcquire(req.Owner) {
			break
		}
	}
	return dlock.Grant{}, s, e.refusal(req.Name, s, req.Owner)
}

// Acquire makes one attempt to grant req; see [dlock.Backend]. It is one
// statement when granted. A fair request that will wait and is refused
// then makes its attempt again and, if refused, takes its place in the
// fair queue, in one transaction.
func (e *Engine) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := e.checkOpen(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if err := checkRequest(req); err != nil {
		return dlock.Grant{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	if !(req.Fair && req.Wait) {
		g, _, err := e.try(ctx, req)
		if err != nil && req.Wait && errors.Is(err, dlock.ErrNotAcquired) {
			return dlock.Grant{}, e.newWaiter(req, NoSeq), err
		}
		return g, nil, err
	}
	var (
		g   dlock.Grant
		ok  bool
		seq int64
		s   lockState
	)
	// The attempt alone first, in one statement: a free lock needs no
	// more. Only when it is refused does the request take its place, in a
	// transaction that tries again first.
	err := e.write(ctx, func(ctx context.Context) error {
		var err error
		g, ok, err = e.attempt(ctx, &e.pool, req, NoSeq)
		return err
	})
	if err == nil && ok {
		e.local.forget(req.Name)
		e.maybeSweep(ctx)
		return g, nil, nil
	}
	if err != nil {
		return dlock.Grant{}, nil, e.wrap(err)
	}
	err = e.write(ctx, func(ctx context.Context) error {
		return e.tx(ctx, func(c *sql.Conn) error {
			var err error
			if g, ok, err = e.attempt(ctx, c, req, NoSeq); err != nil || ok {
				return err
			}
			if s, err = e.state(ctx, c, req.Name, NoSeq); err != nil {
				return err
			}
			if s.fault != "" {
				return e.foreign(req.Name, s.fault) // rolled back: nothing queued
			}
			seq, err = e.enqueue(ctx, c, req)
			return err
		})
	})
	switch {
	case err != nil:
		return dlock.Grant{}, nil, e.wrap(err)
	case ok:
		e.local.forget(req.Name)
		return g, nil, nil
	}
	return dlock.Grant{}, e.newWaiter(req, seq), e.refusal(req.Name, s, req.Owner)
}

// enqueue adds req to the end of the fair queue, sweeping out the waiters
// of its name that died, and returns its sequence number.
func (e *Engine) enqueue(ctx context.Context, c querier, req dlock.Request) (int64, error) {
	if _, err := c.ExecContext(ctx, e.q.sweepName, req.Name); err != nil {
		return 0, err
	}
	args := []any{req.Name, req.Owner, ttlMillis(e.wttl)}
	var seq int64
	if e.d.Returning {
		ok, err := queryOne(ctx, c, e.q.enqueue, args, &seq)
		if err == nil && !ok {
			err = errors.New("INSERT … RETURNING seq returned no row")
		}
		return seq, err
	}
	res, err := c.ExecContext(ctx, e.q.enqueue, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// ---------------------------------------------------------------------
// Holding.

// lost returns the error of a renewal or release of h that changed
// nothing, saying what the database has instead.
func (e *Engine) lost(ctx context.Context, h dlock.Hold) error {
	var s lockState
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		s, err = e.state(ctx, &e.pool, h.Name, NoSeq)
		return err
	})
	switch {
	case err != nil:
		return errorf(dlock.ErrLeaseLost, "token %d (and reading the lock's state failed: %v)", h.Token, err)
	case !s.exists:
		return errorf(dlock.ErrLeaseLost, "token %d: the lock has no row (released and reclaimed)", h.Token)
	case s.fault != "":
		return errorf(dlock.ErrLeaseLost, "token %d: %w", h.Token, e.foreign(h.Name, s.fault))
	case s.heldByOther(h.Owner) || s.holds > 0 && s.remaining > 0 && s.token != h.Token:
		return errorf(dlock.ErrLeaseLost, "held by %q with token %d", s.owner, s.token)
	case s.token != h.Token:
		return errorf(dlock.ErrLeaseLost, "token %d was followed by token %d", h.Token, s.token)
	}
	return errorf(dlock.ErrLeaseLost, "token %d expired or released", h.Token)
}

// Renew extends the hold h to ttl from now by the database's clock, if h
// still holds the lock and has not expired: one UPDATE.
func (e *Engine) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	var n int64
	err := e.write(ctx, func(ctx context.Context) error {
		res, err := e.pool.ExecContext(ctx, e.q.renew, ttlMillis(ttl), h.Name, h.Owner, int64(h.Token))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return e.wrap(err)
	}
	if n == 0 {
		return e.lost(ctx, h)
	}
	return nil
}

// RenewBatch renews many holds in one transaction; see
// [dlock.BatchRenewer].
func (e *Engine) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := e.checkOpen(); err != nil {
		return fail(err)
	}
	renewed := make([]bool, len(rs))
	err := e.write(ctx, func(ctx context.Context) error {
		return e.tx(ctx, func(c *sql.Conn) error {
			stmt, err := c.PrepareContext(ctx, e.q.renew)
			if err != nil {
				return err
			}
			defer stmt.Close()
			for i, r := range rs {
				res, err := stmt.ExecContext(ctx, ttlMillis(r.TTL), r.Hold.Name, r.Hold.Owner, int64(r.Hold.Token))
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				renewed[i] = n > 0
			}
			return nil
		})
	})
	if err != nil {
		return fail(e.wrap(err))
	}
	for i, r := range rs {
		if !renewed[i] {
			errs[i] = e.lost(ctx, r.Hold)
		}
	}
	return errs
}

// Release gives up one hold of h: one UPDATE that decrements the reentry
// count and clears the owner at zero, if h still holds the lock with its
// token and has not expired. A row freed with no waiter rows is deleted
// in the same statement by a trigger (or, under Dialect.DeleteFreed, by
// a DELETE tried first); its token is kept by its fence bucket. The
// waiters of this process are woken at once.
func (e *Engine) Release(ctx context.Context, h dlock.Hold) error {
	return e.release(ctx, h, e.d.DeleteFreed)
}

// release is Release; tryDelete says to try the DELETE of a last hold
// first (see Dialect.DeleteFreed).
func (e *Engine) release(ctx context.Context, h dlock.Hold, tryDelete bool) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	var (
		done  bool
		holds int64
	)
	err := e.write(ctx, func(ctx context.Context) error {
		args := []any{h.Name, h.Owner, int64(h.Token)}
		if tryDelete {
			// The last hold without waiters: the row goes at once.
			res, err := e.pool.ExecContext(ctx, e.q.releaseDelete, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				done = n > 0
				return err
			}
		}
		if e.d.Returning {
			var err error
			done, err = queryOne(ctx, &e.pool, e.q.release, args, &holds)
			return err
		}
		res, err := e.pool.ExecContext(ctx, e.q.release, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		done = n > 0
		return err
	})
	if err != nil {
		return e.wrap(err)
	}
	if !done {
		return e.lost(ctx, h)
	}
	e.maybeSweep(ctx)
	if holds == 0 { // without RETURNING, holds is unknown: wake anyway
		e.local.signal(h.Name)
	}
	return nil
}

// Inspect lists the held locks whose names start with prefix, in name
// order; see [dlock.Inspector]. Waiters is -1 (unknown): the waiters table
// has the fair waiters only (Queued counts them), and a non-fair waiter
// leaves no trace in the store, so a count would leave them out.
func (e *Engine) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	var out []dlock.LockInfo
	err := e.retry(ctx, func(ctx context.Context) error {
		out = nil
		rows, err := e.pool.QueryContext(ctx, e.q.inspect, prefix, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				in  dlock.LockInfo
				r   rawRow
				now int64
				s   lockState
			)
			if err := rows.Scan(&in.Name, &r.owner, &r.token, &r.holds, &r.expires, &now, &in.Queued, &r.badWaiters); err != nil {
				return err
			}
			in.Waiters = -1
			if !strings.HasPrefix(in.Name, prefix) {
				break // names are in byte order: the prefix's range is over
			}
			// A row that is not dlock's is listed with what could be read.
			in.Bad = e.checkRow(r, now, &s)
			in.Owner, in.Token, in.Count, in.TTL = s.owner, s.token, s.holds, max(s.remaining, 0)
			out = append(out, in)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return nil, e.wrap(err)
	}
	return out, nil
}
