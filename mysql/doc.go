// Package mysql is a dlock backend on MySQL 8 or MariaDB 10.5 or later
// through github.com/go-sql-driver/mysql: a lease table, shared with the
// other SQL backends through one engine; or, in session mode, user-level
// locks (GET_LOCK) held by dedicated connections.
//
// [Open] dials a go-sql-driver/mysql DSN and returns a Backend that owns
// its connections; [New] works on a *sql.DB the caller keeps and closes.
// The URL scheme "mysql" is registered with [dlock.Register], so that
// dlock.Open(ctx, "mysql://app:secret@db:3306/app?table=locks") works
// with the package imported; see [ParseURL] (how a URL becomes a DSN) and
// the examples.
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
// process for their turn to wait in the server), and does not cap them. [New] leaves the caller's pool as it is.
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
// added to the server's clock. In lease-table mode the longest TTL is
// [dlock.MaxTTL] (24 h), the Client's ceiling: the lease table has no
// tighter limit of its own. In session mode it is twice the server's
// wait_timeout (2 minutes with [DefaultSessionWaitTimeout]), at most 24 h:
// the server closes a holder's connection, idle between renewals, after
// wait_timeout. [Backend.MaxTTL] says which applies.
//
// # Guarantees
//
// One InnoDB row per lock name in the lease table (default
// "dlock_locks"): owner, reentry count, fencing token and expires_at, in
// milliseconds by the database's clock (UTC_TIMESTAMP(3), fixed for one
// statement, independent of time zones). An acquisition is one
// statement: INSERT … ON DUPLICATE KEY UPDATE, whose assignments keep the
// old row unless the grant's condition holds — a free or expired row is
// taken over (token + 1), the owner's row re-entered — and whose result
// (token and reentry count, or a refusal) comes back in the OK packet's
// last-insert id. InnoDB's row lock serializes competing statements, and
// expiry is judged by the database, never by a client's clock. A release
// is checked by owner, token and expiry; the row of a freed name then
// goes, its token kept by the fence table (see below), so a token never
// goes back, even across restarts (the tables are durable InnoDB data).
// Renewal is one UPDATE. So exclusion holds as long as the database
// is one consistent server (a failover to a replica that lost commits can
// hand out a token again) and the clients' leases end before the
// database's (the Client's deadline is TTL × (1 − drift) after the send
// time of the last renewal).
//
// A step of the database server's wall clock is not safe. Expiry is
// judged by UTC_TIMESTAMP(3) inside each statement, so when the clock steps forward
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
// AUTO_INCREMENT sequence, with heartbeats, so that waiters of dead
// processes drop out after the waiter timeout.
//
// # Waking
//
// A release wakes the waiters of the same Backend at once. MySQL has no
// notifications, so a waiter of another Backend or process looks again
// when the holder's remaining lease, as the database computed it, has
// passed, and meanwhile at an interval that backs off from 5 ms to 100 ms
// (a fair waiter, whose turn nothing announces, at 1/20 of the time it has
// waited so far, within the same bounds) — never a fixed long sleep.
//
// # State kept, and for how long
//
// While held: one lease row (and, in session mode, the advisory lock of
// the holder's connection). While waited on: the row, plus one waiter row
// per fair waiter (refreshed while it waits; a dead waiter's row expires
// after the waiter timeout); plain waiters keep nothing in the database.
// After release: nothing — in lease mode the release of a last hold is
// one DELETE when no waiter row has its name (an inner release, or one
// with fair waiters queued, is that DELETE and then an UPDATE); in session
// mode the release stays one UPDATE with RELEASE_LOCK and the freed row
// goes with the next sweep (a DELETE there would deadlock with the
// acquisition of the waiter that RELEASE_LOCK wakes). A holder that died leaves its row until it expires; then
// the next sweep deletes it (one acquisition or release in 64 of each
// Backend sweeps up to 256 expired or free rows and 256 expired waiter
// rows, and keeps sweeping while it finds full batches), so a killed
// holder's 10,000 rows are gone after about 64 + 40 operations of any
// Backend on the table. [Backend.Reclaim] sweeps at once. Creating the
// triggers needs the TRIGGER privilege (and, with binary logging, SUPER
// or log_bin_trust_function_creators). Tokens: the
// fence table ("dlock_locks_fence", 64 rows) keeps the largest token of
// the deleted rows of each bucket of names (by CRC32 of the name); an
// AFTER DELETE trigger raises it in the deleting transaction, and a new
// row's token is its bucket's mark + 1, read with a shared lock by the INSERT … SELECT; deletions lock their fence rows first in their transaction. So tokens of a
// name strictly increase for the life of the tables, as long as every
// process runs this version (an older one would start a reclaimed name at
// token 1) and the triggers stay. [Migrate] adds the fence table to a
// table of an earlier version, its marks at the largest token there.
//
// # Session mode
//
// With the [Session] option (URL: ?mode=session) every held lock is a
// user-level lock (GET_LOCK) held by one dedicated connection, taken out
// of the pool for as long as it carries the lock and never given back
// while it does. Lock names are limited to 64 characters, so the name is
// "dlock:" and 58 hex digits of SHA-256(table, name) ([SessionLockName]);
// IS_USED_LOCK of it is the holding connection. The lease table is still
// used, with the same rows as lease-table mode:
//
//   - A grant needs both the user lock and the row: the first attempt is
//     one statement, the conditional upsert of lease-table mode (token + 1
//     for a new holder) as INSERT … SELECT … FROM DUAL WHERE
//     GET_LOCK(name, 0) = 1 ON DUPLICATE KEY UPDATE, autocommitted before
//     the grant is reported; no row affected means the lock is taken.
//   - The Deadline promise: when a holder's connection dies the server
//     frees its user lock at once, but the old client may still believe it
//     holds the lock until its own deadline. The row records the holder and
//     expires_at, so the next holder, though it has the user lock, is
//     granted only once that row has expired by the database's clock —
//     after the old holder's Deadline.
//   - Reentrancy by explicit owner counts on the row and returns the same
//     token; on another Backend the hold lives on the row alone, and the
//     lock is free when the last hold is released.
//   - Renewal is one UPDATE on the holding connection that also checks
//     IS_USED_LOCK(name) = CONNECTION_ID(). An UPDATE that matches nothing,
//     or any failure of the connection (KILL, a restart), is a lost lease,
//     reported at once through [dlock.LossReporter] to the other holds on
//     it. The driver gives no way to watch an idle connection's socket, so
//     a KILLed connection is noticed by the next renewal (every TTL/3),
//     still before the lease's deadline. A hold whose lease runs out
//     without a renewal has its connection closed.
//   - Release is one UPDATE whose assignment calls RELEASE_LOCK after
//     InnoDB locked the row, so a woken waiter finds the row free when it
//     gets to it; the clean connection goes back to the pool.
//   - Waiting: a blocked Lock waits in GET_LOCK with a timeout of a year
//     on its own connection — no polling — and Acquire returns once the
//     server shows it waiting ("User lock" in SHOW PROCESSLIST). MariaDB
//     grants user locks to their waiters in the order they asked (its
//     metadata-lock queue; tested here with 8 waiters), so [dlock.Fair]
//     holds in session mode without the waiters table. A cancelled wait is
//     ended with KILL QUERY from another connection; if the lock was
//     granted at that moment, the connection is closed, which frees it.
//     The statements that grant and release are seen through rather than
//     interrupted, so a cancellation never leaves an owned row behind.
//   - Idle connections: [Open] in session mode sets wait_timeout to
//     [DefaultSessionWaitTimeout] (60 s) unless the DSN sets it, so the
//     server closes the connection of a client that vanished without
//     closing its socket; a holder's connection is busy every TTL/3, and
//     TTLs above twice wait_timeout are refused ([dlock.ErrInvalidOption]).
//     With [New], the pool's wait_timeout is yours to set.
//
// Budget: one connection per held lock plus one per name waited for; size
// max_connections for it. Close closes them all. Statements (counted in
// the tests): an uncontended acquisition 1, a re-entry on the same
// Backend 1, a renewal 1, a release 1; a refused TryLock 3 (the attempt,
// the owner's re-entry, the holder's row for the error).
//
// # Schema
//
// The tables are created on first use, or ahead of time by [Migrate]
// (`dlock migrate`), with CREATE TABLE IF NOT EXISTS, which is safe when
// several processes start at once. Names and owners are VARBINARY, so
// they compare and order bytewise whatever the server's collation.
// An application whose database user may not create tables opens with
// [NoMigrate] (?migrate=false): Open then only checks that the tables
// exist and says how to create them if they do not.
//
// Rows that dlock did not write — a token or count out of range (tokens go
// up to 2^43-1, the bits the packed grant leaves them), an owner without
// holds or holds without an owner, waiter rows with no owner or a negative
// expiry — are never taken over or re-entered: TryLock and Lock fail with
// dlock.ErrForeignData naming the table and row, nothing is written, and
// Inspect (`dlock status`) lists them with LockInfo.Bad.
package mysql
