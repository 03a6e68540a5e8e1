// Package mysql is a dlock backend on MariaDB (tested with 10.11; written
// for 10.5 or later, and for MySQL 8, which is not tested) through
// github.com/go-sql-driver/mysql: a lease table, shared with the
// other SQL backends through one engine; or, in session mode, user-level
// locks (GET_LOCK) held by dedicated connections.
//
// [Open] dials a go-sql-driver/mysql DSN and returns a Backend that owns
// its connections; [New] works on a *sql.DB the caller keeps and closes.
// The details of everything below are in docs/backends/mysql.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/mysql.md.
//
// # URL
//
// The scheme "mysql" is registered with [dlock.Register], so that
// dlock.Open(ctx, "mysql://app:secret@db:3306/app?table=locks") works
// with the package imported; see [ParseURL] (how a URL becomes a DSN) and
// the examples.
//
// # Guarantees
//
//   - Exclusion: one InnoDB row per lock name in the lease table (default
//     "dlock_locks"); an acquisition is one INSERT … ON DUPLICATE KEY
//     UPDATE, a renewal and a release one statement each, serialized by
//     InnoDB's row lock, and expiry is judged by the database's
//     UTC_TIMESTAMP(3), never by a client's clock. It holds while the
//     database is one consistent server (a failover to a replica that lost
//     commits can hand out a token again).
//   - Fencing tokens of a name strictly increase for the life of the
//     tables, across restarts and the deletion of free rows (a fence table
//     keeps their marks), as long as every process runs this version and
//     the triggers stay; tokens go up to 2^43-1.
//   - A step of the server's wall clock is not safe: a forward step longer
//     than a lease's remaining TTL lets a second owner in (lease mode)
//     until the first holder's next renewal fails; the token still tells
//     them apart. Keep the clock slewed, not stepped.
//   - The longest TTL is [dlock.MaxTTL] (24 h) in lease-table mode and
//     twice the server's wait_timeout in session mode ([Backend.MaxTTL]).
//     Fair locks queue in the waiters table with heartbeats, so dead
//     waiters drop out after the waiter timeout ([WaiterTimeout]).
//
// # How it works
//
// [Open]'s pool keeps [DefaultPoolMaxConns] connections ([PoolMaxConns]).
// MySQL has no notifications: a release wakes the waiters of the same
// Backend at once; others look again when the holder's lease has passed
// by the database's clock, and meanwhile at an interval that backs off
// from 5 ms to 100 ms. A freed row is deleted, and one operation in 64
// sweeps expired rows ([Backend.Reclaim] sweeps at once). Creating the
// triggers needs the TRIGGER privilege (and, with binary logging, SUPER
// or log_bin_trust_function_creators).
//
// # Elections and watching
//
// Lease mode grants elections ([dlock.Client.Election]) as a holder row
// with the leader's value (the holders table's value column, which
// [Migrate] adds to a table made before), and so does session mode, whose
// leader also holds the name's user lock (see Session mode). MySQL has no notification a client can listen to,
// so a watch ([dlock.Client.Watch], Observe, `dlock status --watch`) reads
// the holders again every 250 ms — the one poll dlock makes — and at once
// after a change made by this process.
//
// # Session mode
//
// With [Session] (URL: ?mode=session) a held lock is also a user-level
// lock ([SessionLockName]) held by a connection of its own; the lease row
// still decides the grant, so a new holder waits out the old one's
// deadline. MariaDB's queue makes [dlock.Fair] hold without the waiters
// table; a KILLed holder connection is noticed at the next renewal. While
// a connection holds a lock its session wait_timeout is the TTL (rounded
// up to whole seconds), so a holder that froze or was cut off loses the
// lock soon after its TTL, as in PostgreSQL's session mode; [Open]
// sets wait_timeout to [DefaultSessionWaitTimeout] unless the DSN does;
// each held lock and each name waited for takes a connection.
// Session mode grants mutexes, semaphores of 1 and elections: their
// holder's connection holds the name's user lock, and the weighted rows
// of lease mode record the kind, the token and the leader's value
// (Proclaim runs on the leader's connection, after checking that it
// still holds the lock). GET_LOCK has no shared mode, so readers could
// not share and permits could not be counted: read-write locks and
// semaphores of N > 1 need lease mode.
//
// # Schema
//
// The tables are created on first use or by [Migrate] (`dlock migrate`);
// with [NoMigrate] (?migrate=false) Open only checks them. Names and owners
// are VARBINARY, compared bytewise. Before it creates anything, Open checks
// every table of the set that exists: a table of that name that is not
// dlock's fails with dlock.ErrForeignData naming it, and nothing is created
// or changed. MySQL commits each CREATE on its own, so a migration that
// fails between them (a privilege missing) leaves the empty tables made so
// far, which a later migration completes. Rows dlock did not write are
// never taken over: locking them fails with dlock.ErrForeignData and
// Inspect lists them with LockInfo.Bad.
//
// # Privileges
//
// Migrating (the first Open, or `dlock migrate`) needs CREATE and TRIGGER
// on the database, plus the privileges below. An application user
// that opens with [NoMigrate] (?migrate=false) needs, for the lease table
// T (default dlock_locks) in database D:
//
//	GRANT SELECT, INSERT, UPDATE, DELETE ON D.T TO 'app'@'%';
//	GRANT SELECT, INSERT, UPDATE, DELETE ON D.T_waiters TO 'app'@'%';
//	GRANT SELECT, UPDATE ON D.T_fence TO 'app'@'%';
//
// (the fence trigger runs with its definer's privileges; session mode's
// GET_LOCK needs no grant). Open checks each of these with a statement
// that matches no row and fails, naming the table and the privilege, with
// an error that says "permission denied" and matches
// dlock.ErrBackendUnavailable.
package mysql
