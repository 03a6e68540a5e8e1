package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// Config configures an Engine.
type Config struct {
	// Table is the lease table's name (default [DefaultTable]); the
	// waiters table is named after it. See [CheckTable].
	Table string

	// WaiterTimeout is how long a fair waiter's queue entry lives without
	// a heartbeat; the process's waiters refresh theirs together every
	// third of that while they wait. A waiter whose process died holds up those behind it for at
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

	// Watch, if set, subscribes to a name's changes by the store's push
	// (see [Engine.Watch]); nil: watches use the Feed, or poll.
	Watch WatchFunc

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
	w        wstatements // of weighted grants
	local    *Local
	ownLocal bool
	wttl     time.Duration
	onClose  func() error
	watchFn  WatchFunc
	watch    watching

	pool   pool     // e.db through prepared statements
	renews sync.Map // size → the text of renewSQL(size)

	beats   beats    // the fair waiters' queue rows, refreshed together
	beatSQL sync.Map // size → the text of beatRows's statement

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
		w:     newWStatements(d, cfg.Table),
		local: cfg.Local, wttl: cfg.WaiterTimeout, onClose: cfg.OnClose, watchFn: cfg.Watch,
	}
	if e.local == nil {
		e.local, e.ownLocal = NewLocal(cfg.Feed), true
	}
	e.pool = pool{db: db, stmts: new(sync.Map)}
	if f, ok := e.local.feed.(interface {
		lend() (*sql.Conn, func(), bool)
	}); ok {
		e.pool.lend = f.lend
	}
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
