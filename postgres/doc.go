// Package postgres is a dlock backend on PostgreSQL (12 or later) through
// pgx (github.com/jackc/pgx/v5): a lease table, shared with the other SQL
// backends through one engine, with LISTEN/NOTIFY wake-ups; or, in session
// mode, advisory locks held by dedicated connections.
//
// [Open] dials a pgx DSN and returns a Backend that owns its connections;
// [New] (a *sql.DB of pgx's stdlib driver) and [NewPool] (a
// *pgxpool.Pool) work on a pool the caller keeps and closes. The details
// of everything below are in docs/backends/postgres.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/postgres.md.
//
// # URL
//
// The schemes "postgres" and "postgresql" are registered with
// [dlock.Register], so that dlock.Open(ctx, "postgres://app@db/app?table=locks")
// works with the package imported; see [ParseURL] and the examples.
//
// # Guarantees
//
//   - Exclusion: one row per lock name in the lease table (default
//     "dlock_locks"); an acquisition, a renewal and a release are one
//     statement each, serialized by PostgreSQL's row lock, and expiry is
//     judged by the database's now(), never by a client's clock. It holds
//     while the database is one consistent server (a failover to an
//     asynchronous standby that lost commits can hand out a token again).
//   - Fencing tokens of a name strictly increase for the life of the
//     tables, across restarts and the deletion of free rows (a fence table
//     keeps their marks), as long as every process runs this version and
//     the triggers stay.
//   - A step of the server's wall clock is not safe: a forward step longer
//     than a lease's remaining TTL lets a second owner in (lease mode)
//     until the first holder's next renewal fails; the token still tells
//     them apart. Keep the clock slewed, not stepped.
//   - The longest TTL is [dlock.MaxTTL] (24 h); fair locks queue in the
//     waiters table with heartbeats, so dead waiters drop out after the
//     waiter timeout ([WaiterTimeout]).
//
// # How it works
//
// [Open]'s pool keeps [DefaultPoolMaxConns] connections ([PoolMaxConns]).
// A trigger NOTIFYs the lease table's channel when a lock is freed; while a
// Backend has waiters one connection LISTENs, and waiters also wake when
// the holder's lease has passed by the database's clock: nobody polls.
// While that connection waits for notifications, the Backend's statements
// borrow it, so that a process waiting for a lock holds one connection
// (64 waiting processes fit in the server's default 100). A
// release deletes the freed row, and one operation in 64 sweeps expired
// rows ([Backend.Reclaim] sweeps at once).
//
// # Elections and watching
//
// Lease mode grants elections ([dlock.Client.Election]) as a holder row
// with the leader's value (the holders table's value column, which
// [Migrate] adds to a table made before), in both modes: in session mode
// the leader's connection also holds the name's advisory key exclusive,
// as a semaphore of 1 does (see below), and Proclaim runs on that
// connection. Watches ([dlock.Client.Watch], Observe, `dlock
// status --watch`) are pushed by NOTIFY in both modes: triggers notify a
// change of a name only while a row of T_watchers names it, so an
// unwatched lock sends nothing. A watch whose listening connection is
// lost subscribes again and reports what changed meanwhile. Over a driver
// other than pgx, a watch polls every 250 ms.
//
// # Session mode
//
// With [Session] (URL: ?mode=session) a held lock is also a session-level
// advisory lock ([SessionKey]) held by a connection of its own; the lease
// row still decides the grant, so a new holder waits out the old one's
// deadline. PostgreSQL's lock queue makes [dlock.Fair] hold without the
// waiters table, a connection ended by the server is reported lost within
// about 100 ms, and each held lock and each name waited for takes one
// connection (and nothing else while it waits): size max_connections for
// it. A fair waiter marks its connection (a shared advisory lock on the
// key's two-int4 form) before it queues, and waits until the fair
// waiters marked before it have queued, so fair waiters queue in the
// order of their Acquire calls.
//
// Session mode also grants read-write locks (and semaphores of 1, not of
// N, and elections): a reader holds the key with pg_advisory_lock_shared, a writer with
// pg_advisory_lock, each on a connection of its own (a waiting reader
// too), with the holders rows of lease mode for the kind, the token and
// the expiry. PostgreSQL queues a request behind a waiting one it
// conflicts with, so a waiting writer holds back later readers; a writer
// downgrades by taking the key shared on its own connection, which the
// server grants ahead of the waiters, and then dropping the exclusive
// hold. See package internal/sqllock's doc for the rules.
//
// # Schema
//
// The tables are created on first use or by [Migrate] (`dlock migrate`);
// with [NoMigrate] (?migrate=false) Open only checks them. Before it
// creates anything, Open checks every table of the set that exists: a
// table of that name that is not dlock's (cirello.io/pglock's "locks", for
// one) fails with dlock.ErrForeignData naming it, and nothing is created or
// changed (no trigger is put on it). Rows dlock did not write are never
// taken over: locking them fails with dlock.ErrForeignData and Inspect
// lists them with LockInfo.Bad.
//
// # Privileges
//
// Migrating (the first Open, or `dlock migrate`) needs a user that may
// create tables, functions and triggers in the schema: run it as the
// tables' owner. An application user that opens with [NoMigrate]
// (?migrate=false) needs, for the lease table T (default dlock_locks):
//
//	GRANT SELECT, INSERT, UPDATE, DELETE ON T, T_waiters, T_listeners TO app;
//	GRANT SELECT, UPDATE ON T_fence TO app;
//	GRANT SELECT, INSERT, DELETE ON T_watchers TO app;
//	GRANT SELECT, INSERT, UPDATE, DELETE ON T_holders TO app; -- semaphores, read-write locks, elections
//
// (the triggers run with the privileges of the user whose statement fires
// them: a release reads T_listeners and raises a mark in T_fence, a grant
// or release reads T_watchers; session mode's advisory locks need no
// grant). T_watchers came with watching (tables made before have none:
// Open does not require it, and a watch asks to migrate). Open checks each of these with a
// statement that matches no row and fails, naming the table and the
// privilege, with an error that says "permission denied" and matches
// dlock.ErrBackendUnavailable.
package postgres
