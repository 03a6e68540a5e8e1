package postgres

import (
	"encoding/binary"
	"time"

	"github.com/dlock-dev/dlock/internal/opt"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// Defaults of the options.
const (
	// DefaultTable is the lease table's name; the waiters table is named
	// after it (DefaultTable + "_waiters").
	DefaultTable = sqllock.DefaultTable
	// DefaultWaiterTimeout is how long a fair waiter's queue row lives
	// without a heartbeat.
	DefaultWaiterTimeout = sqllock.DefaultWaiterTimeout
	// DefaultPoolMaxConns is the size of the connection pool that Open
	// makes (see [PoolMaxConns]).
	DefaultPoolMaxConns = sqllock.DefaultPoolMaxConns
)

// Option configures Open, New, NewPool and Migrate.
type Option interface{ sqllock.Option }

type option = opt.Func[sqllock.Options]

// ConnectTimeout bounds connecting and logging in (pgx's ConnectTimeout;
// default the DSN's, else [DefaultConnectTimeout]; 0: only the context's).
// URL: connect_timeout, whole seconds as libpq takes it or a Go duration.
func ConnectTimeout(d time.Duration) Option { return option(sqllock.SetConnectTimeout(d)) }

// Table sets the lease table's name (default [DefaultTable]; 1 to 48 of
// [A-Za-z0-9_], no leading digit; unquoted, so "Locks" is "locks").
func Table(name string) Option { return option(sqllock.SetTable(name)) }

// WaiterTimeout sets how long a fair waiter's queue row lives without a
// heartbeat: at least 300ms, default [DefaultWaiterTimeout] (URL: waiter_timeout).
func WaiterTimeout(d time.Duration) Option { return option(sqllock.SetWaiterTimeout(d)) }

// Session puts the Backend in session mode (advisory locks), described in
// the package doc's "# Session mode" (URL: mode=session).
func Session() Option { return option(sqllock.SetSession(true)) }

// PoolMaxConns sets the size of the connection pool that Open makes
// (default [DefaultPoolMaxConns], at least 1; URL: pool_max_conns): the
// connections kept open between statements, and in lease-table mode the
// most open at once for statements, plus the LISTEN connection while
// locks are waited for (which statements borrow while it is idle). In
// session mode each held lock and each waiter has a connection of its
// own on top. New and NewPool leave the caller's pool
// as it is.
func PoolMaxConns(n int) Option { return option(sqllock.SetPoolMaxConns(n)) }

// NoMigrate makes Open, New and NewPool only check that the tables exist,
// for a user who may not create them: run [Migrate] first (URL: migrate=false).
func NoMigrate() Option { return option(sqllock.SetNoMigrate(true)) }

// SessionKey returns the advisory lock key that session mode uses for the
// lock name in lease table table (its key on the backend: with the
// Client's namespace, if any): the first 8 bytes of SHA-256(table, name)
// as a bigint. It finds the connection that holds a lock:
//
//	SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
//		AND (classid::bigint << 32 | objid::bigint) = key & x'ffffffffffffffff'::bigint
//
// or more simply with pg_try_advisory_lock(key) from a session of your own.
func SessionKey(table, name string) int64 {
	h := sqllock.KeyHash(table, name)
	return int64(binary.BigEndian.Uint64(h[:8]))
}
