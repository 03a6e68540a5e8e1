package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
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

// Backend is a dlock backend on a PostgreSQL lease table, safe for
// concurrent use. It has the methods of the SQL backends' shell:
// [dlock.Backend], [dlock.BatchRenewer], [dlock.Inspector],
// [dlock.Migrator], [dlock.LossReporter] and [dlock.TTLLimiter], plus
// String, Table, Session and Reclaim.
type Backend struct{ *shell }

type shell = sqllock.Backend

// DefaultConnectTimeout is the connect timeout Open uses when the DSN
// sets none (connect_timeout): [dlock.DefaultConnectTimeout].
const DefaultConnectTimeout = dlock.DefaultConnectTimeout

// pgServer names PostgreSQL in the errors of Open.
var pgServer = connect.Server{
	Backend: "postgres",
	Kind:    "PostgreSQL",
	Auth: connect.ErrorOf(func(pe *pgconn.PgError) bool {
		return pe.Code == "28P01" || pe.Code == "28000" // invalid password, invalid authorization
	}),
	Answer: connect.ErrorOf[*pgconn.PgError](nil),
}

// Open connects to the PostgreSQL database of dsn (a pgx connection
// string: a URL "postgres://user:pass@host:5432/db?sslmode=disable" or
// "host=… dbname=…" keywords) and returns a Backend on it, with the tables
// created if needed. ctx bounds it; connecting and logging in are bounded
// by the connect timeout too. If the database cannot be reached or refuses
// the login, the error names the server, matches
// [dlock.ErrBackendUnavailable], and nothing is left open. Close closes
// the connections.
func Open(ctx context.Context, dsn string, opts ...Option) (*Backend, error) {
	cfg, err := sqllock.Resolve("postgres", opts)
	if err != nil {
		return nil, err
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message shows the connection string with its password
		// replaced.
		return nil, invalid("%v", err)
	}
	if err := poolParam(pc, &cfg); err != nil {
		return nil, err
	}
	pc.ConnectTimeout = cfg.ConnectTimeout(pc.ConnectTimeout)
	desc := "postgres " + address(pc)
	probe := new(connect.Probe)
	pc.DialFunc = pgconn.DialFunc(probe.Dial(connect.DialFunc(pc.DialFunc)))
	db := stdlib.OpenDB(*pc, stdlib.OptionShouldPing(shouldPing))
	cfg.SizePool(db, 1) // and the LISTEN connection (see rawConn)
	db.SetConnMaxIdleTime(time.Minute)
	if err := sqllock.Ping(ctx, db, pc.ConnectTimeout, pgServer, address(pc), probe); err != nil {
		return nil, err
	}
	listen := func(ctx context.Context) (listenConn, error) { return rawConn(ctx, db) }
	return start(ctx, db, desc, cfg, listen, db.Close)
}

// poolParam takes pool_max_conns out of a DSN in keyword form (pgx would
// send it to the server, which refuses it) into cfg, unless the
// PoolMaxConns option set it.
func poolParam(pc *pgx.ConnConfig, cfg *sqllock.Options) error {
	v, ok := pc.RuntimeParams[sqllock.PoolMaxConnsParam]
	if !ok {
		return nil
	}
	delete(pc.RuntimeParams, sqllock.PoolMaxConnsParam)
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return invalid("%s=%q is not a whole number of at least 1", sqllock.PoolMaxConnsParam, v)
	}
	if cfg.PoolMaxConns == 0 {
		cfg.PoolMaxConns = n
	}
	return nil
}

// New returns a Backend on db, a PostgreSQL database the caller opened
// through pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib),
// creating the tables if needed. Close does not close db. While locks
// are waited for, the Backend keeps one connection of db's pool to LISTEN
// on; with a pool of another driver, waiters in other processes are not
// notified and look again at a backing-off interval (5 to 100 ms) instead.
// Checking the server and creating the tables is bounded by 30 s.
func New(db *sql.DB, opts ...Option) (*Backend, error) {
	return sqllock.OnClient("postgres", "*sql.DB", db == nil, opts, func(ctx context.Context, cfg sqllock.Options) (*Backend, error) {
		desc, err := describe(ctx, db)
		if err != nil {
			return nil, sqllock.OpenError("postgres", pgDialect, err)
		}
		var listen func(context.Context) (listenConn, error)
		if _, ok := db.Driver().(*stdlib.Driver); ok {
			listen = func(ctx context.Context) (listenConn, error) { return rawConn(ctx, db) }
		}
		return start(ctx, db, desc, cfg, listen, nil)
	})
}

// NewPool returns a Backend on pool, creating the tables if needed. Close
// does not close pool. While locks are waited for, the Backend keeps one
// of the pool's connections to LISTEN on (taken out of the pool, and
// closed when the waiters are gone). Between statements it keeps the
// connections they used (up to the pool's MaxConns) for a second before
// giving them back. Checking the server and creating the tables is
// bounded by 30 s.
func NewPool(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	return sqllock.OnClient("postgres", "*pgxpool.Pool", pool == nil, opts, func(ctx context.Context, cfg sqllock.Options) (*Backend, error) {
		desc := "postgres " + address(pool.Config().ConnConfig)
		db := stdlib.OpenDBFromPool(pool, stdlib.OptionShouldPing(shouldPing))
		// database/sql keeps 2 idle connections by default: beyond that,
		// every statement took a connection from the pool and gave it
		// back, which made contended hand-offs 3x slower. Idle ones go
		// back to the caller's pool after a second.
		db.SetMaxIdleConns(int(pool.Config().MaxConns))
		db.SetConnMaxIdleTime(time.Second)
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, sqllock.OpenError(desc, pgDialect, err)
		}
		// The LISTEN connection is taken out of the pool for good (a
		// pooled one would carry its LISTEN to the pool's next user), so
		// statements do not borrow it.
		listen := func(ctx context.Context) (listenConn, error) {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return listenConn{}, err
			}
			pc := c.Hijack()
			return listenConn{pc: pc, release: func() { closeConn(pc) }}, nil
		}
		return start(ctx, db, desc, cfg, listen, db.Close)
	})
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
// it, so that its LISTEN goes with it. While it waits for notifications,
// the Backend's statements borrow it (see lender): a process that waits
// for a lock uses one connection.
func rawConn(ctx context.Context, db *sql.DB) (listenConn, error) {
	sc, err := db.Conn(ctx)
	if err != nil {
		return listenConn{}, err
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
		return listenConn{}, err
	}
	return listenConn{pc: pc, sc: sc, release: func() {
		sc.Raw(func(any) error { return driver.ErrBadConn })
		sc.Close()
	}}, nil
}

// start makes the Backend on db; listen, if set, gives the connection
// to LISTEN on. onClose, if set, releases what Open made: at Close, or
// now if start fails.
func start(ctx context.Context, db *sql.DB, desc string, cfg sqllock.Options,
	listen func(context.Context) (listenConn, error), onClose func() error) (*Backend, error) {
	var (
		feed  sqllock.Feed
		watch sqllock.WatchFunc
	)
	if listen != nil {
		lf := newListenFeed(cfg.Table, listen)
		feed = lf.feed
		watch = (&pgWatch{db: db, table: cfg.Table, feed: lf.feed, hub: &lf.hub}).watch
	}
	sb, err := sqllock.Start(ctx, cfg, sqllock.Setup{
		DB: db, Dialect: pgDialect, Desc: desc, Feed: feed, Watch: watch, OnClose: onClose,
		Session: func(_ context.Context, e *sqllock.Engine) (*sqllock.Sessions, error) {
			return sqllock.NewSessions(e, sessionDialect(func(pc *pgconn.PgConn) bool {
				return closedByServer(pc.Conn())
			})), nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &Backend{sb}, nil
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
// adds missing fence rows (the Table option names them), as Open, New and
// NewPool do on first use. It is safe to run from several processes at
// once: the creation runs in one transaction under an advisory lock.
// `dlock migrate` uses it to create them ahead of time.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	return sqllock.MigrateOn(ctx, db, "postgres", pgDialect, opts)
}

// invalid returns an error matching dlock.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return sqllock.Errorf(dlock.ErrInvalidOption, "postgres: "+format, args...)
}
