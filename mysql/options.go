package mysql

import (
	"encoding/hex"
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

// Option configures Open, New and Migrate.
type Option interface{ apply(*sqllock.Options) }

type option func(*sqllock.Options)

func (f option) apply(o *sqllock.Options) { f(o) }

// ConnectTimeout bounds how long Open waits to connect and log in, and
// every later connection's dial (the driver's Timeout; default the DSN's
// timeout, else [DefaultConnectTimeout]; 0: no limit but the context's).
// The URL parameter connect_timeout sets it.
func ConnectTimeout(d time.Duration) Option { return option(sqllock.SetConnectTimeout(d)) }

// Table sets the lease table's name (default [DefaultTable]): 1 to 48
// ASCII letters, digits and underscores, not starting with a digit. The
// waiters table is the name + "_waiters". Whether case matters depends on
// the server's lower_case_table_names.
func Table(name string) Option { return option(sqllock.SetTable(name)) }

// WaiterTimeout sets how long a fair waiter's queue row lives without a
// heartbeat (default [DefaultWaiterTimeout], at least 300ms): the waiter
// of a process that died holds up those behind it for at most this long.
func WaiterTimeout(d time.Duration) Option { return option(sqllock.SetWaiterTimeout(d)) }

// Session puts the Backend in session mode: every held lock is a
// user-level lock (GET_LOCK) held by one connection of its own, taken out
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
	return o, o.Err("mysql")
}

// SessionLockName returns the user-level lock name that session mode uses
// for the lock name in lease table table (its key on the backend: with
// the Client's namespace, if any): "dlock:" and 58 hex digits of
// SHA-256(table, name), as lock names are limited to 64 characters.
// IS_USED_LOCK(SessionLockName(table, name)) is the connection holding it.
func SessionLockName(table, name string) string {
	h := sqllock.KeyHash(table, name)
	return "dlock:" + hex.EncodeToString(h[:])[:58]
}
