package sqllock

import (
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/opt"
	"github.com/dlock-dev/dlock/internal/urlq"
)

// Options are the options every SQL backend shares. Each backend's
// package has an Option type of its own whose constructors (Table,
// WaiterTimeout, Session, NoMigrate, ConnectTimeout) forward to the
// setters below, which record a bad value for [Options.Err].
type Options struct {
	Table         string
	WaiterTimeout time.Duration
	Session       bool
	NoMigrate     bool
	Connect       *time.Duration // nil: the DSN's, else dlock.DefaultConnectTimeout
	PoolMaxConns  int            // 0: DefaultPoolMaxConns; see [Options.SizePool]

	errs opt.Problems
}

// DefaultOptions returns the options before any is applied.
func DefaultOptions() Options { return Options{Table: DefaultTable} }

// Check records a bad option value unless ok (see [opt.Problems.Check]);
// Err reports it.
func (o *Options) Check(ok bool, format string, args ...any) bool {
	return o.errs.Check(ok, format, args...)
}

// Err returns the bad values recorded, as one error matching
// dlock.ErrInvalidOption and naming the backend; nil if there were none.
func (o *Options) Err(backend string) error {
	return o.errs.Err(dlock.ErrInvalidOption, backend)
}

// Option is what a SQL backend's Option type embeds (see [opt.Option]):
//
//	type Option interface{ sqllock.Option }
type Option = opt.Option[Options]

// Resolve applies a backend's options, skipping nil ones, to
// [DefaultOptions] and returns them with [Options.Err].
func Resolve[O Option](backend string, opts []O) (Options, error) {
	o := DefaultOptions()
	opt.Apply(&o, opts)
	return o, o.Err(backend)
}

// SetTable sets the lease table's name (see [CheckTable]).
func SetTable(name string) func(*Options) {
	return func(o *Options) {
		if err := CheckTable(name); o.Check(err == nil, "%v", err) {
			o.Table = name
		}
	}
}

// SetWaiterTimeout sets how long a fair waiter's queue row lives without a
// heartbeat (at least [MinWaiterTimeout]).
func SetWaiterTimeout(d time.Duration) func(*Options) {
	return func(o *Options) {
		if o.Check(d >= MinWaiterTimeout, "waiter timeout %v is below the minimum %v", d, MinWaiterTimeout) {
			o.WaiterTimeout = d
		}
	}
}

// SetSession chooses session mode (true) or lease-table mode.
func SetSession(on bool) func(*Options) { return func(o *Options) { o.Session = on } }

// SetNoMigrate makes the backend only check its tables (true) instead of
// creating them.
func SetNoMigrate(no bool) func(*Options) { return func(o *Options) { o.NoMigrate = no } }

// SetConnectTimeout bounds connecting (0: no limit but the context's).
func SetConnectTimeout(d time.Duration) func(*Options) {
	return func(o *Options) {
		if o.Check(d >= 0, "connect timeout %v is negative", d) {
			o.Connect = &d
		}
	}
}

// PoolMaxConnsParam is the URL parameter of [SetPoolMaxConns]; pgx's
// pgxpool and libpq users know it by this name.
const PoolMaxConnsParam = "pool_max_conns"

// DefaultPoolMaxConns is the size of the connection pool that the
// postgres and mysql backends' Open makes: enough for 32 goroutines of one
// Client to run their statements at once without opening and closing a
// connection per operation.
const DefaultPoolMaxConns = 32

// SetPoolMaxConns sets the size of the pool that Open makes (at least 1).
func SetPoolMaxConns(n int) func(*Options) {
	return func(o *Options) {
		if o.Check(n >= 1, "pool max conns (%s) %d is below 1", PoolMaxConnsParam, n) {
			o.PoolMaxConns = n
		}
	}
}

// SizePool sizes db, a pool that Open made, for o: PoolMaxConns (default
// [DefaultPoolMaxConns]) connections kept open between statements; in
// lease-table mode also at most that many open for statements, plus
// extra (a connection that the backend keeps out of the pool for its own
// use, such as PostgreSQL's LISTEN). Session mode does not cap the open
// connections: each held lock and each waiter takes one out of the pool
// for as long as it lasts, on top of those kept for statements.
func (o Options) SizePool(db *sql.DB, extra int) {
	n := o.PoolMaxConns
	if n == 0 {
		n = DefaultPoolMaxConns
	}
	db.SetMaxIdleConns(n)
	if !o.Session {
		db.SetMaxOpenConns(n + extra)
	}
}

// URLParams reads the URL parameters the SQL backends share: table,
// waiter_timeout and connect_timeout, and with modes (the servers:
// postgres, mysql) also mode=lease|session, migrate=true|false and
// pool_max_conns=N. It returns their setters in that order.
func URLParams(q *urlq.Query, modes bool) []func(*Options) {
	var sets []func(*Options)
	urlq.Add(&sets, "table", q.String, SetTable)
	urlq.Add(&sets, "waiter_timeout", q.Duration, SetWaiterTimeout)
	urlq.Add(&sets, connect.Param, urlq.ParsedBy(q, connect.ParseTimeout), SetConnectTimeout)
	if !modes {
		return sets
	}
	urlq.Add(&sets, "mode", urlq.ParsedBy(q, ParseMode), SetSession)
	urlq.Add(&sets, "migrate", urlq.ParsedBy(q, ParseMigrate), SetNoMigrate)
	urlq.Add(&sets, PoolMaxConnsParam, urlq.ParsedBy(q, parsePoolMaxConns), SetPoolMaxConns)
	return sets
}

func parsePoolMaxConns(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("not a whole number of at least 1")
	}
	return n, nil
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
