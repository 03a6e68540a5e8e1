package mysql

import (
	"encoding/hex"
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

// Option configures Open, New and Migrate.
type Option interface{ sqllock.Option }

type option = opt.Func[sqllock.Options]

// ConnectTimeout bounds connecting and logging in (the driver's Timeout;
// default the DSN's timeout, else [DefaultConnectTimeout]; 0: only the
// context's; URL: connect_timeout).
func ConnectTimeout(d time.Duration) Option { return option(sqllock.SetConnectTimeout(d)) }

// Table sets the lease table's name (default [DefaultTable]; 1 to 48 of
// [A-Za-z0-9_], no leading digit; case as lower_case_table_names says).
func Table(name string) Option { return option(sqllock.SetTable(name)) }

// WaiterTimeout sets how long a dead process's fair waiter holds up those
// behind it: at least 300ms, default [DefaultWaiterTimeout].
func WaiterTimeout(d time.Duration) Option { return option(sqllock.SetWaiterTimeout(d)) }

// Session puts the Backend in session mode (GET_LOCK), described in the
// package doc's "# Session mode" (URL: mode=session).
func Session() Option { return option(sqllock.SetSession(true)) }

// PoolMaxConns sets the size of the connection pool that Open makes
// (default [DefaultPoolMaxConns], at least 1; URL: pool_max_conns): the
// connections kept open between statements, and in lease-table mode the
// most open at once. In session mode each held lock and each waiter has a
// connection of its own on top. New leaves the caller's pool as it is.
func PoolMaxConns(n int) Option { return option(sqllock.SetPoolMaxConns(n)) }

// NoMigrate makes Open and New only check that the tables exist, for a
// user who may not create them (after [Migrate]; URL: migrate=false).
func NoMigrate() Option { return option(sqllock.SetNoMigrate(true)) }

// SessionLockName returns the user-level lock name that session mode uses
// for the lock name in lease table table (its key on the backend: with
// the Client's namespace, if any): "dlock:" and 58 hex digits of
// SHA-256(table, name), as lock names are limited to 64 characters.
// IS_USED_LOCK(SessionLockName(table, name)) is the connection holding it.
func SessionLockName(table, name string) string {
	h := sqllock.KeyHash(table, name)
	return "dlock:" + hex.EncodeToString(h[:])[:58]
}
