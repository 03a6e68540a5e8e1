package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// Backend is a dlock backend on a PostgreSQL lease table. It is safe for
// concurrent use; see the package doc for what it guarantees.
type Backend struct {
	e    *sqllock.Engine
	s    *sqllock.Sessions // session mode; nil in lease-table mode
	desc string
}

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
	_ dlock.Migrator     = (*Backend)(nil)
	_ dlock.LossReporter = (*Backend)(nil)
)

// setupTimeout bounds connecting and creating the tables when the caller
// gives no context (Open, New, NewPool).
const setupTimeout = 30 * time.Second

// DefaultConnectTimeout is the connect timeout Open uses when the DSN
// sets none (connect_timeout): [dlock.DefaultConnectTimeout].
const DefaultConnectTimeout = dlock.DefaultConnectTimeout

// pgServer names PostgreSQL in the errors of Open.
var pgServer = connect.Server{
	Backend: "postgres",
	Kind:    "PostgreSQL",
	Auth: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000")
	},
	Answer: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe)
	},
}

// Open connects to the PostgreSQL database of dsn (a pgx connection
// string: a URL "postgres://user:pass@host:5432/db?sslmode=disable" or
// "host=… dbname=…" keywords) and returns a Backend on it, with the tables
// created if needed. If the database cannot be reached or refuses the
// login, the error names the server, matches
// [dlock.ErrBackendUnavailable], and nothing is left open. Close closes
// the connections.
func Open(dsn string, opts ...Option) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return open(ctx, dsn, opts)
}

func open(ctx context.Context, dsn string, opts []Option) (*Backend, error) {
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message shows the connection string with its password
		// replaced.
		return nil, invalid("%v", err)
	}
	switch {
	case cfg.connect != nil:
		pc.ConnectTimeout = *cfg.connect
	case pc.ConnectTimeout == 0:
		pc.ConnectTimeout = DefaultConnectTimeout
	}
	desc := "postgres " + address(pc)
	probe := new(connect.Probe)
	pc.DialFunc = pgconn.DialFunc(probe.Dial(connect.DialFunc(pc.DialFunc)))
	db := stdlib.OpenDB(*pc, stdlib.OptionShouldPing(shouldPing))
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	pctx, cancel := connect.Bound(ctx, pc.ConnectTimeout)
	err = db.PingContext(pctx)
	if err != nil {
		err := pgServer.Explain(pctx, address(pc), probe, err)
		db.Close()
		cancel()
		return nil, err
	}
	cancel()
	probe.Done()
	listen := func(ctx context.Context) (*pgx.Conn, func(), error) {
		c, err := pgx.ConnectConfig(ctx, pc.Copy())
		if err != nil {
			return nil, nil, err
		}
		return c, func() { closeConn(c) }, nil
	}
	b, err := newBackend(ctx, db, desc, cfg, listen, db.Close)
	if err != nil {
		db.Close()
		return nil, openError(desc, err)
	}
	return b, nil
}

// New returns a Backend on db, a PostgreSQL database the caller opened
// through pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib),
// creating the tables if needed. Close does not close db. While locks
// are waited for, the Backend keeps one connection of db's pool to LISTEN
// on; with a pool of another driver, waiters in other processes are not
// notified and look again at a backing-off interval (5 to 100 ms) instead.
func New(db *sql.DB, opts ...Option) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	desc, err := describe(ctx, db)
	if err != nil {
		return nil, openError("postgres", err)
	}
	var listen func(context.Context) (*pgx.Conn, func(), error)
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		listen = func(ctx context.Context) (*pgx.Conn, func(), error) { return rawConn(ctx, db) }
	}
	b, err := newBackend(ctx, db, desc, cfg, listen, nil)
	if err != nil {
		return nil, openError(desc, err)
	}
	return b, nil
}

// NewPool returns a Backend on pool, creating the tables if needed. Close
// does not close pool. While locks are waited for, the Backend keeps one
// of the pool's connections to LISTEN on (taken out of the pool, and
// closed when the waiters are gone).
func NewPool(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if pool == nil {
		return nil, invalid("nil *pgxpool.Pool")
	}
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	desc := "postgres " + address(pool.Config().ConnConfig)
	db := stdlib.OpenDBFromPool(pool, stdlib.OptionShouldPing(shouldPing))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, openError(desc, err)
	}
	listen := func(ctx context.Context) (*pgx.Conn, func(), error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		pc := c.Hijack()
		return pc, func() { closeConn(pc) }, nil
	}
	b, err := newBackend(ctx, db, desc, cfg, listen, db.Close)
	if err != nil {
		db.Close()
		return nil, openError(desc, err)
	}
	return b, nil
}

// shouldPing decides whether database/sql's pool pings a connection before
// reusing it: after a second of idleness (pgx's default), and whenever
// the server has closed it or sent something unasked (see
// closedByServer) — then the ping fails and the pool takes another
// connection, instead of a statement failing with "unexpected EOF" after
// a server restart or pg_terminate_backend.
func shouldPing(_ context.Context, p stdlib.ShouldPingParams) bool {
	return p.IdleDuration > time.Second || closedByServer(p.Conn.PgConn().Conn())
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx)
}

// rawConn takes a connection out of db for LISTEN; the release discards
// it, so that its LISTEN goes with it.
func rawConn(ctx context.Context, db *sql.DB) (*pgx.Conn, func(), error) {
	sc, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	var pc *pgx.Conn
	err = sc.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("driver connection %T is not pgx's", dc)
		}
		pc = c.Conn()
		return nil
	})
	if err != nil {
		sc.Close()
		return nil, nil, err
	}
	return pc, func() {
		sc.Raw(func(any) error { return driver.ErrBadConn })
		sc.Close()
	}, nil
}

func newBackend(ctx context.Context, db *sql.DB, desc string, cfg config,
	listen func(context.Context) (*pgx.Conn, func(), error), onClose func() error) (*Backend, error) {
	var feed sqllock.Feed
	if listen != nil {
		feed = newListenFeed(channel(cfg.table), listen)
	}
	e, err := sqllock.New(ctx, db, pgDialect, sqllock.Config{
		Table:         cfg.table,
		WaiterTimeout: cfg.waiterTimeout,
		NoMigrate:     cfg.noMigrate,
		Desc:          desc,
		Feed:          feed,
		OnClose:       onClose,
	})
	if err != nil {
		if feed != nil {
			feed.Close()
		}
		return nil, err
	}
	b := &Backend{e: e, desc: desc}
	if cfg.session {
		b.s = sqllock.NewSessions(e, sessionDialect(func(pc *pgconn.PgConn) bool {
			return closedByServer(pc.Conn())
		}))
	}
	return b, nil
}

// describe returns "postgres host:port/db" as the server reports it.
func describe(ctx context.Context, db *sql.DB) (string, error) {
	var (
		host   sql.NullString
		port   sql.NullInt64
		dbname string
	)
	err := db.QueryRowContext(ctx, `SELECT host(inet_server_addr()), inet_server_port(), current_database()`).Scan(&host, &port, &dbname)
	if err != nil {
		return "", err
	}
	if !host.Valid {
		return "postgres (unix socket)/" + dbname, nil
	}
	return "postgres " + net.JoinHostPort(host.String, strconv.FormatInt(port.Int64, 10)) + "/" + dbname, nil
}

// address is "host:port/db" of a connection configuration, without the
// user or password.
func address(c *pgx.ConnConfig) string {
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))) + "/" + c.Database
}

// Migrate creates the lease table, the waiters table, the fence table
// and the triggers (NOTIFY, reclamation) in db if they do not exist, and
// adds missing fence rows (the Table option names them), as
// Open, New and NewPool do on first use. It is safe to run from several
// processes at once: the creation runs in one transaction under an
// advisory lock. `dlock migrate` uses it to create them ahead of time.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	cfg, err := resolve(opts)
	if err != nil {
		return err
	}
	return sqllock.Migrate(ctx, db, pgDialect, cfg.table)
}

// Migrate creates the backend's tables if they do not exist and checks
// them, as [Migrate] does for its database; see [dlock.Migrator].
func (b *Backend) Migrate(ctx context.Context) error { return b.e.Migrate(ctx) }

// String describes the backend: "postgres 127.0.0.1:5432/db" (no user or
// password).
func (b *Backend) String() string { return b.desc }

// Table returns the name of the lease table.
func (b *Backend) Table() string { return b.e.Table() }

// Acquire makes one attempt to grant req; see [dlock.Backend]. It is one
// statement (INSERT … ON CONFLICT DO UPDATE … RETURNING) when granted.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if b.s != nil {
		return b.s.Acquire(ctx, req)
	}
	return b.e.Acquire(ctx, req)
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
// expiry. The waiters of this process are woken at once; a trigger
// NOTIFYs those of other processes when the lock is freed.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if b.s != nil {
		return b.s.Release(ctx, h)
	}
	return b.e.Release(ctx, h)
}

// Reclaim deletes now the state of every free name: lease rows that are
// free, or expired with their holder gone, and have no waiter rows, and
// expired waiter rows. The backend does the same within its normal
// operations (see the package doc); Reclaim is for a sweep on demand. It
// returns the number of lease rows deleted. Tokens stay strictly
// increasing: a deleted row's token is kept in the fence table.
func (b *Backend) Reclaim(ctx context.Context) (int, error) { return b.e.Reclaim(ctx) }

// Inspect lists the held locks whose names start with prefix; see
// [dlock.Inspector]. Waiters is -1 (unknown): non-fair waiters are not
// registered in the store; Queued counts the fair waiters.
func (b *Backend) Inspect(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	return b.e.Inspect(ctx, prefix)
}

// Close stops the backend's listener and closes the connections it opened
// (not a *sql.DB or pool given to New or NewPool). It does not release
// held locks.
func (b *Backend) Close() error {
	if b.s != nil {
		return b.s.Close()
	}
	return b.e.Close()
}

// ReportLoss registers the Client's loss handler; see
// [dlock.LossReporter]. In session mode the Backend reports a hold lost
// as soon as it learns that the connection carrying it is gone (the
// server closed it, a renewal on it failed, or its lease ran out without
// a renewal); in lease-table mode it never calls it.
func (b *Backend) ReportLoss(handler func(dlock.Hold, error)) {
	if b.s != nil {
		b.s.ReportLoss(handler)
	}
}

// Session reports whether the Backend is in session mode (see [Session]).
func (b *Backend) Session() bool { return b.s != nil }

// openErr is an error of Open, New or NewPool: it names the server, and
// matches dlock.ErrBackendUnavailable when the database cannot be reached
// or used.
type openErr struct {
	desc string
	err  error
}

func openError(desc string, err error) error {
	var ke interface{ Unwrap() []error }
	if errors.Is(err, dlock.ErrInvalidOption) || errors.As(err, &ke) && errors.Is(err, dlock.ErrBackendUnavailable) {
		return fmt.Errorf("%s: %w", desc, err)
	}
	return &openErr{desc: desc, err: err}
}

func (e *openErr) Error() string { return e.desc + ": " + e.err.Error() }

func (e *openErr) Unwrap() []error {
	if pgDialect.Classify(e.err) == sqllock.Other {
		return []error{e.err}
	}
	return []error{dlock.ErrBackendUnavailable, e.err}
}

// invalid returns an error matching dlock.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return sqllock.Errorf(dlock.ErrInvalidOption, "postgres: "+format, args...)
}
