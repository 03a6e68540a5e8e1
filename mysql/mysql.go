package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/go-sql-driver/mysql"
)

// Backend is a dlock backend on a MySQL or MariaDB lease table. It is
// safe for concurrent use; see the package doc for what it guarantees.
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
	_ dlock.TTLLimiter   = (*Backend)(nil)
)

// DefaultSessionWaitTimeout is the wait_timeout that Open sets in session
// mode unless the DSN sets one: the server closes a connection idle for
// longer, and so frees the lock of a client that vanished without
// closing its connection. A holder's connection is busy with a renewal
// every TTL/3, so TTLs up to twice this are accepted.
const DefaultSessionWaitTimeout = 60 * time.Second

// setupTimeout bounds connecting and creating the tables when the caller
// gives no context (Open, New).
const setupTimeout = 30 * time.Second

// DefaultConnectTimeout is the connect timeout Open uses when the DSN sets
// none (timeout=): [dlock.DefaultConnectTimeout].
const DefaultConnectTimeout = dlock.DefaultConnectTimeout

// myServer names MySQL in the errors of Open.
var myServer = connect.Server{
	Backend: "mysql",
	Kind:    "MySQL",
	Auth: func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == myAccessDenied
	},
	Answer: func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me)
	},
}

// logger sends the driver's log lines to slog.Default() at debug level
// (the driver's default prints them on stderr).
type logger struct{}

func (logger) Print(v ...any) {
	if l := slog.Default(); l.Enabled(context.Background(), slog.LevelDebug) {
		l.Debug("mysql: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}

// isDefaultLogger reports whether l is the driver's own logger, which
// writes to stderr (not one the program set with mysql.SetLogger).
func isDefaultLogger(l mysql.Logger) bool {
	ll, ok := l.(*log.Logger)
	return ok && ll.Prefix() == "[mysql] " && ll.Writer() == os.Stderr
}

// Open connects to the database of dsn, a go-sql-driver/mysql DSN
// ("user:password@tcp(host:3306)/db?param=value"; the database must be
// named), and returns a Backend on it, with the tables created if needed.
// Open sets clientFoundRows=true and interpolateParams=true, which the
// backend needs, and a dial timeout of [DefaultConnectTimeout] unless the
// DSN has one. If the database cannot be reached or refuses the login,
// the error names the server, matches [dlock.ErrBackendUnavailable], and
// nothing is left open. Close closes the connections.
func Open(dsn string, opts ...Option) (*Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, invalid("DSN: %v", err) // the driver's messages do not repeat the DSN
	}
	return open(ctx, mc, opts)
}

func open(ctx context.Context, mc *mysql.Config, opts []Option) (*Backend, error) {
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	if mc.DBName == "" {
		return nil, invalid("the DSN names no database")
	}
	mc.ClientFoundRows = true
	mc.InterpolateParams = true
	switch {
	case cfg.connect != nil:
		mc.Timeout = *cfg.connect
	case mc.Timeout == 0:
		mc.Timeout = DefaultConnectTimeout
	}
	if mc.Logger == nil || isDefaultLogger(mc.Logger) {
		mc.Logger = logger{}
	}
	probe := new(connect.Probe)
	switch {
	case mc.DialFunc != nil:
		mc.DialFunc = probe.Dial(mc.DialFunc)
	case mc.Net == "tcp" || mc.Net == "tcp4" || mc.Net == "tcp6" || mc.Net == "unix":
		// The driver's own dialer for these (others may be registered
		// with RegisterDialContext and are left alone).
		mc.DialFunc = probe.Dial((&net.Dialer{}).DialContext)
	}
	if cfg.session {
		if mc.Params == nil {
			mc.Params = make(map[string]string)
		}
		if _, ok := mc.Params["wait_timeout"]; !ok {
			mc.Params["wait_timeout"] = strconv.Itoa(int(DefaultSessionWaitTimeout / time.Second))
		}
	}
	desc := "mysql " + mc.Addr + "/" + mc.DBName
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, invalid("%v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(8)
	idle := time.Minute
	if w, err := strconv.Atoi(mc.Params["wait_timeout"]); err == nil && w > 0 {
		// Drop idle connections well before the server does (database/sql
		// looks for them only every idle time): a connection it closed
		// can fail the next statement.
		idle = min(idle, time.Duration(w)*time.Second/4)
	}
	db.SetConnMaxIdleTime(idle)
	pctx, cancel := connect.Bound(ctx, mc.Timeout)
	if err := db.PingContext(pctx); err != nil {
		err := myServer.Explain(pctx, mc.Addr+"/"+mc.DBName, probe, err)
		db.Close()
		cancel()
		return nil, err
	}
	cancel()
	probe.Done()
	b, err := newBackend(ctx, db, desc, cfg, db.Close)
	if err != nil {
		db.Close()
		return nil, openError(desc, err)
	}
	return b, nil
}

// New returns a Backend on db, a MySQL or MariaDB database the caller
// opened with go-sql-driver/mysql, creating the tables if needed. db's DSN
// must set clientFoundRows=true (New checks it): a renewal that matches
// the row but changes nothing must count. interpolateParams=true saves a
// round trip per statement inside transactions. Close does not close db.
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
		return nil, openError("mysql", err)
	}
	if err := checkFoundRows(ctx, db); err != nil {
		return nil, openError(desc, err)
	}
	b, err := newBackend(ctx, db, desc, cfg, nil)
	if err != nil {
		return nil, openError(desc, err)
	}
	return b, nil
}

// checkFoundRows checks that an UPDATE counts the rows it matched, not the
// rows it changed, on a temporary table of one connection.
func checkFoundRows(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `CREATE TEMPORARY TABLE dlock_found_rows_probe (x INT)`); err != nil {
		return err
	}
	defer c.ExecContext(context.WithoutCancel(ctx), `DROP TEMPORARY TABLE dlock_found_rows_probe`)
	if _, err := c.ExecContext(ctx, `INSERT INTO dlock_found_rows_probe VALUES (1)`); err != nil {
		return err
	}
	res, err := c.ExecContext(ctx, `UPDATE dlock_found_rows_probe SET x = 1`)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return invalid("the DSN must set clientFoundRows=true (an UPDATE that matches a row but changes nothing must count it)")
	}
	return nil
}

func newBackend(ctx context.Context, db *sql.DB, desc string, cfg config, onClose func() error) (*Backend, error) {
	e, err := sqllock.New(ctx, db, myDialect, sqllock.Config{
		Table:         cfg.table,
		WaiterTimeout: cfg.waiterTimeout,
		NoMigrate:     cfg.noMigrate,
		Desc:          desc,
		OnClose:       onClose,
	})
	if err != nil {
		return nil, err
	}
	b := &Backend{e: e, desc: desc}
	if cfg.session {
		var wait int64
		if err := db.QueryRowContext(ctx, `SELECT @@SESSION.wait_timeout`).Scan(&wait); err != nil {
			e.Close()
			return nil, err
		}
		b.s = sqllock.NewSessions(e, mySession)
		b.s.MaxTTL = 2 * time.Duration(wait) * time.Second
	}
	return b, nil
}

// describe returns "mysql host:port/db" as the server reports it.
func describe(ctx context.Context, db *sql.DB) (string, error) {
	var (
		host   string
		port   int
		dbname sql.NullString
	)
	if err := db.QueryRowContext(ctx, `SELECT @@hostname, @@port, DATABASE()`).Scan(&host, &port, &dbname); err != nil {
		return "", err
	}
	if !dbname.Valid {
		return "", invalid("the connection has no current database (name one in the DSN)")
	}
	return fmt.Sprintf("mysql %s:%d/%s", host, port, dbname.String), nil
}

// Migrate creates the lease table, the waiters table, the fence table
// and its trigger in db if they do not exist, and adds missing fence
// rows (the Table option names them), as Open and New do on first
// use. It is safe to run from several processes at once (CREATE TABLE IF
// NOT EXISTS takes the table's metadata lock). `dlock migrate` uses it to
// create them ahead of time.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	cfg, err := resolve(opts)
	if err != nil {
		return err
	}
	return sqllock.Migrate(ctx, db, myDialect, cfg.table)
}

// Migrate creates the backend's tables if they do not exist and checks
// them, as [Migrate] does for its database; see [dlock.Migrator].
func (b *Backend) Migrate(ctx context.Context) error { return b.e.Migrate(ctx) }

// String describes the backend: "mysql 127.0.0.1:3306/db" (no user or
// password).
func (b *Backend) String() string { return b.desc }

// Table returns the name of the lease table.
func (b *Backend) Table() string { return b.e.Table() }

// Acquire makes one attempt to grant req; see [dlock.Backend]. It is one
// statement (INSERT … ON DUPLICATE KEY UPDATE, the result in the
// last-insert id) when granted.
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
// expiry. The waiters of this process are woken at once.
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

// Close closes the connections Open opened (not a *sql.DB given to New).
// It does not release held locks.
func (b *Backend) Close() error {
	if b.s != nil {
		return b.s.Close()
	}
	return b.e.Close()
}

// ReportLoss registers the Client's loss handler; see
// [dlock.LossReporter]. In session mode the Backend reports a hold lost
// as soon as it learns that the connection carrying it is gone (a
// renewal on it failed, or its lease ran out without a renewal); in
// lease-table mode it never calls it.
func (b *Backend) ReportLoss(handler func(dlock.Hold, error)) {
	if b.s != nil {
		b.s.ReportLoss(handler)
	}
}

// Session reports whether the Backend is in session mode (see [Session]).
func (b *Backend) Session() bool { return b.s != nil }

// MaxTTL implements [dlock.TTLLimiter]: in session mode twice the
// server's wait_timeout (a holder's connection is idle between renewals
// every TTL/3, and the server closes it after wait_timeout), at most
// [dlock.MaxTTL]; in lease-table mode 0, so [dlock.MaxTTL] applies.
func (b *Backend) MaxTTL() time.Duration {
	if b.s != nil && b.s.MaxTTL > 0 {
		return min(b.s.MaxTTL, dlock.MaxTTL)
	}
	return 0
}

// openErr is an error of Open or New: it names the server, and matches
// dlock.ErrBackendUnavailable when the database cannot be reached or used.
type openErr struct {
	desc string
	err  error
}

func openError(desc string, err error) error {
	if errors.Is(err, dlock.ErrInvalidOption) || errors.Is(err, dlock.ErrBackendUnavailable) {
		return fmt.Errorf("%s: %w", desc, err)
	}
	return &openErr{desc: desc, err: err}
}

func (e *openErr) Error() string { return e.desc + ": " + e.err.Error() }

func (e *openErr) Unwrap() []error {
	if myDialect.Classify(e.err) == sqllock.Other {
		return []error{e.err}
	}
	return []error{dlock.ErrBackendUnavailable, e.err}
}

// invalid returns an error matching dlock.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return sqllock.Errorf(dlock.ErrInvalidOption, "mysql: "+format, args...)
}
