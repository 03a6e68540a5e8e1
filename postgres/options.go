package postgres

import (
	"encoding/binary"
	"time"

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
)

// Option configures Open, New, NewPool and Migrate.
type Option interface{ apply(*sqllock.Options) }

type option func(*sqllock.Options)

func (f option) apply(o *sqllock.Options) { f(o) }

// ConnectTimeout bounds how long Open waits to connect and log in, and
// every later connection's set-up (pgx's ConnectTimeout; default the DSN's
// connect_timeout, else [DefaultConnectTimeout]; 0: no limit but the
// context's). The URL parameter connect_timeout sets it, in whole seconds
// as libpq takes it or as a Go duration.
func ConnectTimeout(d time.Duration) Option { return option(sqllock.SetConnectTimeout(d)) }

// Table sets the lease table's name (default [DefaultTable]): 1 to 48
// ASCII letters, digits and underscores, not starting with a digit. The
// waiters table is the name + "_waiters". Unquoted, as PostgreSQL folds
// it: "Locks" and "locks" are the same table.
func Table(name string) Option { return option(sqllock.SetTable(name)) }

// WaiterTimeout sets how long a fair waiter's queue row lives without a
// heartbeat (default [DefaultWaiterTimeout], at least 300ms): the waiter
// of a process that died holds up those behind it for at most this long.
func WaiterTimeout(d time.Duration) Option { return option(sqllock.SetWaiterTimeout(d)) }

// Session puts the Backend in session mode: every held lock is a
// session-level advisory lock held by one connection of its own, taken out
// of the pool for as long as it carries the lock, and a blocked Lock waits
// in the server's queue for it. The lease table still gives the fencing
// token, the reentry count and the holder's expiry. See the package doc,
// "Session mode". The URL form is ?mode=session.
func Session() Option { return option(sqllock.SetSession(true)) }

// NoMigrate makes Open and New check that the lease table and the waiters
// table exist, instead of creating them: for an application user without
// the right to create tables, after `dlock migrate` (or [Migrate]) created
// them. A missing table is then an error of Open or New that says so. The
// URL form is ?migrate=false.
func NoMigrate() Option { return option(sqllock.SetNoMigrate(true)) }

func resolve(opts []Option) (sqllock.Options, error) {
	o := sqllock.DefaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o, o.Err("postgres")
}

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
