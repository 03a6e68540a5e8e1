package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

// Backend is the shell of the SQL backends: an Engine in lease-table
// mode, or Sessions over it in session mode, chosen at construction. The
// backends' packages embed it; they keep only their dialect and their
// connection set-up.
type Backend struct {
	e *Engine
	s *Sessions // session mode; nil in lease-table mode
}

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
	_ dlock.Migrator     = (*Backend)(nil)
	_ dlock.LossReporter = (*Backend)(nil)
	_ dlock.TTLLimiter   = (*Backend)(nil)
)

// Setup is what a backend's package gives [Start] besides the options.
type Setup struct {
	DB      *sql.DB
	Dialect Dialect
	Desc    string       // "postgres 127.0.0.1:5432/db", for String and errors
	Feed    Feed         // see Config.Feed; Start closes it on error
	Watch   WatchFunc    // see Config.Watch
	Local   *Local       // see Config.Local
	OnClose func() error // see Config.OnClose

	// Session, if set, starts session mode over the engine when the
	// options ask for it; nil: the backend has no session mode.
	Session func(ctx context.Context, e *Engine) (*Sessions, error)
}

// Start makes the engine of s with the options o (creating or checking the
// tables, bounded by ctx), and session mode over it if o.Session. Its
// errors name s.Desc (see [OpenError]). On error it closes s.Feed and
// calls s.OnClose: what a Backend would have released on Close is released
// when none is made.
func Start(ctx context.Context, o Options, s Setup) (*Backend, error) {
	e, err := New(ctx, s.DB, s.Dialect, Config{
		Table:         o.Table,
		WaiterTimeout: o.WaiterTimeout,
		NoMigrate:     o.NoMigrate,
		Desc:          s.Desc,
		Feed:          s.Feed,
		Watch:         s.Watch,
		Local:         s.Local,
		OnClose:       s.OnClose,
	})
	if err != nil {
		if s.Feed != nil {
			s.Feed.Close()
		}
		if s.OnClose != nil {
			s.OnClose()
		}
		return nil, OpenError(s.Desc, s.Dialect, err)
	}
	b := &Backend{e: e}
	if o.Session {
		if s.Session == nil {
			e.Close()
			return nil, OpenError(s.Desc, s.Dialect, errorf(dlock.ErrInvalidOption, "%s has no session mode", s.Dialect.Name))
		}
		if b.s, err = s.Session(ctx, e); err != nil {
			e.Close()
			return nil, OpenError(s.Desc, s.Dialect, err)
		}
	}
	return b, nil
}

// Migrate creates the backend's tables if they do not exist and checks
// them; see [dlock.Migrator].
func (b *Backend) Migrate(ctx context.Context) error { return b.e.Migrate(ctx) }

// String describes the backend: "postgres 127.0.0.1:5432/db" (no user or
// password).
func (b *Backend) String() string { return b.e.String() }

// Table returns the name of the lease table.
func (b *Backend) Table() string { return b.e.Table() }

// Session reports whether the Backend is in session mode.
func (b *Backend) Session() bool { return b.s != nil }

// Acquire makes one attempt to grant req; see [dlock.Backend]. It is one
// statement when granted.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	var (
		g   dlock.Grant
		w   dlock.Waiter
		err error
	)
	if b.s != nil {
		g, w, err = b.s.Acquire(ctx, req)
	} else {
		g, w, err = b.e.Acquire(ctx, req)
	}
	if err == nil {
		b.e.changed(req.Name)
	}
	return g, w, err
}

// Renew extends the hold h to ttl from now by the database's clock: one
// UPDATE, checked by owner, token and expiry.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if b.s != nil {
		return b.s.Renew(ctx, h, ttl)
	}
	return b.e.Renew(ctx, h, ttl)
}

// RenewBatch renews many holds in one transaction; see [dlock.BatchRenewer].
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	if b.s != nil {
		return b.s.RenewBatch(ctx, rs)
	}
	return b.e.RenewBatch(ctx, rs)
}

// Release gives up one hold of h: one UPDATE, checked by owner, token and
// expiry. The waiters of this process are woken at once.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	var err error
	if b.s != nil {
		err = b.s.Release(ctx, h)
	} else {
		err = b.e.Release(ctx, h)
	}
	if err == nil {
		b.e.changed(h.Name)
	}
	return err
}

// Reclaim deletes now the state of every free name: lease rows that are
// free, or expired with their holder gone, and have no waiter rows, and
// expired waiter rows. The backend does the same within its normal
// operations; Reclaim is for a sweep on demand. It returns the number of
// lease rows deleted. Tokens stay strictly increasing: a deleted row's
// token is kept in the fence table.
func (b *Backend) Reclaim(ctx context.Context) (int, error) { return b.e.Reclaim(ctx) }

// Inspect lists the held locks whose names start with prefix; see
// [dlock.Inspector]. Waiters is -1 (unknown): non-fair waiters are not
// registered in the store; Queued counts the fair waiters.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	return b.e.Inspect(ctx, prefix)
}

// Close stops the backend and closes what it opened (not a database or
// pool the caller gave it). It does not release held locks.
func (b *Backend) Close() error {
	if b.s != nil {
		return b.s.Close()
	}
	return b.e.Close()
}

// ReportLoss registers the Client's loss handler; see
// [dlock.LossReporter]. In session mode the Backend reports a hold lost as
// soon as it learns that the connection carrying it is gone; in
// lease-table mode it never calls it.
func (b *Backend) ReportLoss(handler func(dlock.Hold, error)) {
	if b.s != nil {
		b.s.ReportLoss(handler)
	}
}

// MaxTTL implements [dlock.TTLLimiter]: the session mode's limit
// (Sessions.MaxTTL) if it has one, at most [dlock.MaxTTL]; otherwise 0,
// so [dlock.MaxTTL] applies.
func (b *Backend) MaxTTL() time.Duration {
	if b.s != nil && b.s.MaxTTL > 0 {
		return min(b.s.MaxTTL, dlock.MaxTTL)
	}
	return 0
}

// OpenError is an error of a backend's Open or New: it names the server
// (desc), and matches dlock.ErrBackendUnavailable when the database cannot
// be reached or used (by d.Classify).
func OpenError(desc string, d Dialect, err error) error {
	if errors.Is(err, dlock.ErrInvalidOption) || errors.Is(err, dlock.ErrBackendUnavailable) {
		return fmt.Errorf("%s: %w", desc, err)
	}
	return &openErr{desc: desc, d: d, err: err}
}

type openErr struct {
	desc string
	d    Dialect
	err  error
}

func (e *openErr) Error() string { return e.desc + ": " + e.err.Error() }

func (e *openErr) Unwrap() []error {
	if e.d.Classify(e.err) == Other {
		return []error{e.err}
	}
	return []error{dlock.ErrBackendUnavailable, e.err}
}

// PoolOf returns the pool that b runs its statements on, for the backends'
// tests of how Open sized it.
func PoolOf(b *Backend) *sql.DB { return b.e.db }
