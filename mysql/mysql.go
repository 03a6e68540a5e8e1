package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/go-sql-driver/mysql"
)

// Backend is a dlock backend on a MySQL or MariaDB lease table, safe for
// concurrent use. It has the methods of the SQL backends' shell:
// [dlock.Backend], [dlock.BatchRenewer], [dlock.Inspector],
// [dlock.Migrator], [dlock.LossReporter] and [dlock.TTLLimiter] (see the
// package doc, "# Guarantees"), plus String, Table, Session and Reclaim.
type Backend struct{ *shell }

type shell = sqllock.Backend

// DefaultSessionWaitTimeout is the wait_timeout that Open sets in session
// mode unless the DSN sets one: the server closes a connection idle for
// longer, and so frees the lock of a client that vanished without
// closing its connection. A holder's connection is busy with a renewal
// every TTL/3, so TTLs up to twice this are accepted.
const DefaultSessionWaitTimeout = 60 * time.Second

// DefaultConnectTimeout is the connect timeout Open uses when the DSN sets
// none (timeout=): [dlock.DefaultConnectTimeout].
const DefaultConnectTimeout = dlock.DefaultConnectTimeout

// myServer names MySQL in the errors of Open.
var myServer = connect.Server{
	Backend: "mysql",
	Kind:    "MySQL",
	Auth:    connect.ErrorOf(func(me *mysql.MySQLError) bool { return me.Number == myAccessDenied }),
	Answer:  connect.ErrorOf[*mysql.MySQLError](nil),
}

// logger silences the driver's log lines (its default prints them on
// stderr): the library never writes on its own. A program that wants them
// calls mysql.SetLogger itself.
type logger struct{}

func (logger) Print(...any) {}

// isDefaultLogger reports whether l is the driver's own logger, which
// writes to stderr (not one the program set with mysql.SetLogger).
func isDefaultLogger(l mysql.Logger) bool {
	ll, ok := l.(*log.Logger)
	return ok && ll.Prefix() == "[mysql] " && ll.Writer() == os.Stderr
}

// Open connects to the database of dsn, a go-sql-driver/mysql DSN
// ("user:password@tcp(host:3306)/db?param=value"; the database must be
// named), and returns a Backend on it, with the tables created if needed.
// ctx bounds it; connecting and logging in are bounded by the connect
// timeout too. Open sets clientFoundRows=true and interpolateParams=true,
// which the backend needs, and a dial timeout of [DefaultConnectTimeout]
// unless the DSN has one. If the database cannot be reached or refuses the
// login, the error names the server, matches [dlock.ErrBackendUnavailable],
// and nothing is left open. Close closes the connections.
func Open(ctx context.Context, dsn string, opts ...Option) (*Backend, error) {
	cfg, err := sqllock.Resolve("mysql", opts)
	if err != nil {
		return nil, err
	}
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, invalid("DSN: %v", err) // the driver's messages do not repeat the DSN
	}
	if mc.DBName == "" {
		return nil, invalid("the DSN names no database")
	}
	mc.ClientFoundRows = true
	mc.InterpolateParams = true
	mc.Timeout = cfg.ConnectTimeout(mc.Timeout)
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
	if cfg.Session {
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
	cfg.SizePool(db, 0)
	idle := time.Minute
	if w, err := strconv.Atoi(mc.Params["wait_timeout"]); err == nil && w > 0 {
		// Drop idle connections well before the server does (database/sql
		// looks for them only every idle time): a connection it closed
		// can fail the next statement.
		idle = min(idle, time.Duration(w)*time.Second/4)
	}
	db.SetConnMaxIdleTime(idle)
	if err := sqllock.Ping(ctx, db, mc.Timeout, myServer, mc.Addr+"/"+mc.DBName, probe); err != nil {
		return nil, err
	}
	return start(ctx, db, desc, cfg, db.Close)
}

// New returns a Backend on db, a MySQL or MariaDB database the caller
// opened with go-sql-driver/mysql, creating the tables if needed. db's DSN
// must set clientFoundRows=true (New checks it): a renewal that matches
// the row but changes nothing must count. interpolateParams=true saves a
// round trip per statement inside transactions. Close does not close db.
// Checking the server and creating the tables is bounded by 30 s.
func New(db *sql.DB, opts ...Option) (*Backend, error) {
	return sqllock.OnClient("mysql", "*sql.DB", db == nil, opts, func(ctx context.Context, cfg sqllock.Options) (*Backend, error) {
		desc, err := describe(ctx, db)
		if err != nil {
			return nil, sqllock.OpenError("mysql", myDialect, err)
		}
		if err := checkFoundRows(ctx, db); err != nil {
			return nil, sqllock.OpenError(desc, myDialect, err)
		}
		return start(ctx, db, desc, cfg, nil)
	})
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

// start makes the Backend on db. onClose, if set, releases what Open
// made: at Close, or now if start fails.
func start(ctx context.Context, db *sql.DB, desc string, cfg sqllock.Options, onClose func() error) (*Backend, error) {
	sb, err := sqllock.Start(ctx, cfg, sqllock.Setup{
		DB: db, Dialect: myDialect, Desc: desc, OnClose: onClose,
		Session: func(ctx context.Context, e *sqllock.Engine) (*sqllock.Sessions, error) {
			var wait int64
			if err := db.QueryRowContext(ctx, `SELECT @@SESSION.wait_timeout`).Scan(&wait); err != nil {
				return nil, err
			}
			s := sqllock.NewSessions(e, mySession)
			s.MaxTTL = 2 * time.Duration(wait) * time.Second
			return s, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &Backend{sb}, nil
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
	return sqllock.MigrateOn(ctx, db, "mysql", myDialect, opts)
}

// invalid returns an error matching dlock.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return sqllock.Errorf(dlock.ErrInvalidOption, "mysql: "+format, args...)
}
