// Package postgres is a dlock backend on PostgreSQL (12 or later) through
// pgx (github.com/jackc/pgx/v5): a lease table, shared with the other SQL
// backends through one engine, with LISTEN/NOTIFY wake-ups; or, in session
// mode, advisory locks held by dedicated connections.
//
// [Open] dials a pgx DSN and returns a Backend that owns its connections;
// [New] (a *sql.DB of pgx's stdlib driver) and [NewPool] (a
// *pgxpool.Pool) work on a pool the caller keeps and closes. The URL
// schemes "postgres" and "postgresql" are registered with
// [dlock.Register], so that dlock.Open(ctx, "postgres://app@db/app?table=locks")
// works with the package imported; see [ParseURL] and the examples.
//
// # Connections
//
// The pool that [Open] makes keeps [DefaultPoolMaxConns] (32) connections
// open between statements, so that many goroutines of one Client run
// their statements at once without connecting per operation; in
// lease-table mode that is also the most it opens. Set it with
// [PoolMaxConns] or the URL's pool_max_conns=N. Session mode takes one
// more connection out of the pool per held lock, and one per name that
// this process waits for (its other waiters of the name wait in the
// process for their turn to wait in the server), and does not cap them. [New] and [NewPool] leave the caller's pool as it is.
//
// In lease-table mode the statements of one name in one process take
// turns: its writes, and the looks of its waiters, fair or not (a herd
// looks once per change, on one connection, and one of its plain waiters
// tries); different names run at once. The fair waiters' queue rows are
// kept alive by one UPDATE per 256 waiters of the process every third of
// the waiter timeout. The Client renews the leases that are due
// together: one UPDATE per 256 leases with the same TTL.
//
// # Maximum TTL
//
// A TTL is sent as whole milliseconds (rounded up, without overflow) and
// added to the server's now(). The longest TTL is [dlock.MaxTTL] (24 h),
// the Client's ceiling: the lease table has no tighter limit of its own.
//
// # Guarantees
//
// One row per lock name in the lease table (default "dlock_locks"):
// owner, reentry count, fencing token and expires_at, in milliseconds by
// the database's clock. An acquisition is one statement, INSERT … ON
// CONFLICT (name) DO UPDATE … WHERE … RETURNING, which inserts a new row
// (its fence bucket's mark + 1), takes over a free or expired row (token + 1) or re-enters
// the owner's row; PostgreSQL's row lock on the conflicting row
// serializes competing statements, and every statement judges expiry by
// the database's now(), never by a client's clock. A release is one
// UPDATE checked by owner, token and expiry, which clears the owner;
// the row then goes, its token kept by the fence table (see below), so a
// token never goes back, even across restarts (the tables are ordinary
// durable data). Renewal is the same kind of UPDATE.
// So exclusion holds as long as the database is one consistent server
// (a primary; a failover to an asynchronous standby that lost commits can
// hand out a token again) and the clients' leases end before the
// database's (the Client's deadline is TTL × (1 − drift) after the send
// time of the last renewal).
//
// A step of the database server's wall clock is not safe. Expiry is
// judged by now() inside each statement, so when the clock steps forward
// by more than a lease's remaining TTL, every lease looks expired at once:
// in lease mode the next acquirer takes the row over (token + 1) while the
// first holder's Client still reports its lease valid until its next
// renewal fails (within TTL/3, at the latest at [dlock.Lease.Deadline]),
// so for that time two owners believe they hold the lock. In session mode
// a second owner also needs the advisory lock, which the holder's
// connection keeps whatever the clock says; the step makes the holder's
// next renewal find its row expired, and its lease is reported lost. What
// the fencing token still protects: the take-over's token is higher, so a
// resource that checks tokens rejects the first holder's writes once it
// has seen the new one. A backward step lengthens every lease by the step
// (a crashed holder's lock frees that much later). Keep the server's clock
// slewed, not stepped (NTP with stepping only at boot).
//
// Fair locks queue in the waiters table ("dlock_locks_waiters") by an
// identity sequence, with heartbeats, so that waiters of dead processes
// drop out after the waiter timeout.
//
// # State kept, and for how long
//
// While held: one lease row (and, in session mode, the advisory lock of
// the holder's connection). While waited on: the row, plus one waiter row
// per fair waiter (refreshed while it waits; a dead waiter's row expires
// after the waiter timeout); plain waiters keep nothing in the database.
// After release: the free row, until its last lease would have run out,
// so that the name's next acquisition updates it in place; then the next
// sweep deletes it. A holder that died leaves its row until it expires; then
// the next sweep deletes it (one acquisition or release in 64 of each
// Backend sweeps up to 256 expired rows and 256 expired waiter
// rows, and keeps sweeping while it finds full batches), so a killed
// holder's 10,000 rows are gone after about 64 + 40 operations of any
// Backend on the table. [Backend.Reclaim] sweeps at once. Tokens: the
// fence table ("dlock_locks_fence", 64 rows) keeps the largest token of
// the deleted rows of each bucket of names (by SHA-256 of the name); an
// AFTER DELETE trigger raises it in the deleting transaction, and a new
// row's token is its bucket's mark + 1, read FOR SHARE. So tokens of a
// name strictly increase for the life of the tables, as long as every
// process runs this version (an older one would start a reclaimed name at
// token 1) and the triggers stay. [Migrate] adds the fence table to a
// table of an earlier version, its marks at the largest token there.
//
// # Waking
//
// A trigger on the tables NOTIFYs the channel named after the lease table
// whenever a lock is freed or a fair waiter leaves a lock that is not held
// (one leaving a held lock wakes nobody: the release will). While a Backend has
// waiters, one connection LISTENs on it (a separate connection for
// [Open], one taken from the pool for [New] and [NewPool]); waiters also
// wake when the holder's remaining lease, as the database computed it,
// has passed, because an expiry commits nothing. Nobody polls at a fixed
// interval.
//
// # Session mode
//
// With the [Session] option (URL: ?mode=session) every held lock is a
// session-level advisory lock held by one dedicated connection, taken out
// of the pool for as long as it carries the lock and never given back
// while it does (a pooled connection must not carry an advisory lock to
// another goroutine). The key is a bigint, the first 8 bytes of
// SHA-256(table, name) ([SessionKey]); two names of a table share a key —
// and so wait for each other, never break exclusion — with a probability
// of about 2^-64 per pair. The lease table is still used, with the same
// rows as lease-table mode:
//
//   - A grant needs both the advisory lock and the row: the first attempt
//     is one statement that tries the advisory lock and, if it got it,
//     makes the conditional upsert of lease-table mode (token + 1 for a new
//     holder), autocommitted before the grant is reported.
//   - The Deadline promise: when a holder's connection dies the server
//     frees its advisory lock at once, but the old client may still
//     believe it holds the lock until its own deadline. The row records
//     the holder and expires_at, so the next holder, though it has the
//     advisory lock, is granted only once that row has expired by the
//     database's clock — after the old holder's Deadline.
//   - Reentrancy by explicit owner counts on the row and returns the same
//     token. On the same Backend the inner holds ride on the outer hold's
//     connection; on another Backend (another process) the first attempt
//     re-enters the owner's row in the same statement and the hold lives
//     on the row alone; the lock is free when the last hold is released.
//   - Renewal is one statement on the holding connection: an UPDATE of
//     expires_at that checks in pg_locks that this connection
//     (pg_backend_pid()) still holds the advisory lock. An UPDATE that
//     matches nothing, or any failure of the connection, is a lost lease.
//     A watcher peeks at the sockets of holding connections every 100 ms
//     without a round trip, so a connection ended by the server
//     (pg_terminate_backend, a shutdown or restart) is reported lost within
//     about that time through [dlock.LossReporter] (Done closes, Err says
//     why), not only at the next renewal. A hold whose lease runs out
//     without a renewal has its connection closed, so its advisory lock
//     never outlives its row.
//   - Release is one statement: the row's UPDATE (owner cleared at the
//     last hold) and pg_advisory_unlock; the clean connection goes back
//     to the pool. A connection that might still hold the lock is closed
//     — the pgx connection itself, so that a *pgxpool.Pool ([NewPool])
//     destroys it rather than taking it back with the lock.
//   - Waiting: a blocked Lock waits in pg_advisory_lock on its own
//     connection — no polling — and Acquire returns only once the server
//     has queued it (it looks in pg_locks), so PostgreSQL's lock queue,
//     which grants advisory locks in the order they were requested, makes
//     [dlock.Fair] hold in session mode without the waiters table (Fair
//     changes nothing there). A cancelled wait sends a cancel request; if
//     the lock was granted at that moment, the connection is closed, which
//     frees it. The statements that grant and release are seen through
//     rather than interrupted, so a cancellation never leaves an owned row
//     behind.
//   - Idle connections: while a connection holds a lock its
//     idle_session_timeout (PostgreSQL 14 and later) is the TTL + 1 s, so
//     the server ends the connection of a client that vanished without
//     closing its socket once its lease has run out (renewals keep it
//     busy every TTL/3); the release resets it. A client that exits or
//     crashes closes its socket and frees its locks at once; a waiter that
//     vanished with its host is bounded only by TCP keepalives
//     (tcp_keepalives_idle on the server).
//
// Budget: one connection per held lock plus one per name waited for,
// and the listener; size max_connections for it. Close closes them all. Statements
// (counted in the tests): an uncontended acquisition 1, a re-entry on the
// same Backend 1, a renewal 1, a release 1; a refused TryLock 2 (the
// attempt and the holder's row for the error).
//
// # Schema
//
// The tables, index and trigger are created on first use, or ahead of
// time by [Migrate] (`dlock migrate`), in one transaction under an
// advisory lock, so processes that start at once neither fail nor
// create anything twice.
// An application whose database user may not create tables opens with
// [NoMigrate] (?migrate=false): Open then only checks that the tables
// exist and says how to create them if they do not.
//
// Rows that dlock did not write — a token or count out of range (a token
// at 2^63-1 has no successor), an owner without holds or holds without an
// owner, waiter rows with no owner or a negative expiry — are never taken
// over or re-entered: TryLock and Lock fail with dlock.ErrForeignData
// naming the table and row, nothing is written, and Inspect
// (`dlock status`) lists them with LockInfo.Bad.
package postgres
