// Package sqllock is the lock engine shared by dlock's SQL backends
// (sqlite, postgres, mysql): one implementation of the SQL logic over
// database/sql, with a small [Dialect] for what differs between databases
// (placeholders, the clock expression, RETURNING, the statement that starts
// a writing transaction, the schema, error codes). The dialects of
// PostgreSQL and MySQL live in their backends' packages, so that a program
// that uses only sqlite links neither driver. [Sessions] is session mode
// (an advisory lock held by a dedicated connection, plus the lease row), with
// a [SessionDialect] per database. [Backend] is the shell the backends
// embed: it chooses lease or session mode at construction ([Start]), with
// the [Options] and URL parameters ([URLParams]) they share.
//
// # Tables
//
// The lease table (default "dlock_locks") has a row per lock name that is
// held, waited for, or not yet reclaimed: owner ("" when free), holds
// (the reentry count), token (the fencing token of the current or last
// grant) and expires_at (milliseconds since the Unix epoch by the
// database's clock). The waiters table (the lease table's name +
// "_waiters") is the fair queue: one row per waiting fair acquisition,
// ordered by an increasing sequence, each with its own expires_at, so
// that the waiter of a process that died drops out after
// [Config.WaiterTimeout]. The rows of a process's fair waiters are
// refreshed together, one UPDATE per 256 of them every third of the
// waiter timeout, sent by the first of them whose refresh is due. The fence table (+
// "_fence") has a constant number of rows ([Dialect.Buckets]: 64, or 1 on
// SQLite), each the high-water mark of the tokens of the deleted lease
// rows of the names in its bucket.
//
// # Reclamation and tokens
//
// A free name with no waiter rows keeps no row. The release that frees a
// row deletes it in the same statement (an AFTER UPDATE trigger; on MySQL,
// whose triggers cannot change their own table, the release is a DELETE
// tried first). Rows the release cannot delete — expired with their holder
// gone, freed while fair waiters queued, or left by MySQL's session mode —
// and expired waiter rows are deleted by a sweep that runs inside normal
// operations: one acquisition or release in [SweepEvery] of each engine
// deletes up to [SweepBatch] of them, and while a sweep finds a full batch
// every call sweeps. So a dead holder's rows are gone within SweepEvery +
// ⌈rows/SweepBatch⌉ operations of any engine on the table after they
// expire; no goroutine or scheduled job is involved. The sweep deletes only
// rows of dlock's ([RowOK]) that are free or expired and have no waiter
// row at all (a foreign waiter row keeps its name's row), so foreign data
// stays and is reported as before.
//
// Tokens stay strictly increasing per name for the life of the tables: an
// AFTER DELETE trigger raises the fence mark of the deleted row's bucket to
// its token in the deleting statement's transaction, whoever deletes it,
// and a new row takes its bucket's mark + 1 in the inserting statement.
// The mark is read so that it cannot be stale: SQLite writes one
// transaction at a time; PostgreSQL reads it FOR SHARE (and a deletion
// locks the fence row before the lease row, [Dialect.FenceFirst], so the
// two cannot deadlock); MySQL's INSERT … SELECT reads it with a shared lock
// (and its deletions lock the fence rows first in their transaction,
// [Dialect.FenceTx]). [Migrate] creates the fence table beside a table of
// an earlier version and starts every mark at the largest token of the
// lease table. The assumptions: every process on the table runs a version
// with the fence (an older one would give a reclaimed name token 1 again),
// and the triggers are not dropped.
//
// # Statements
//
// Time is always the database's: every statement computes "now" with
// [Dialect.Now] inside itself and never compares client clocks.
//
//   - Acquire is one statement on dialects with RETURNING (SQLite,
//     PostgreSQL): INSERT … ON CONFLICT (name) DO UPDATE … WHERE …
//     RETURNING token, holds. It inserts a new row (token 1), takes over a
//     free or expired row (token + 1), or re-enters a row its owner holds
//     (holds + 1, same token); the WHERE lets a take-over through only when
//     no live fair waiter is queued ahead of the caller. A refused attempt
//     changes nothing and reads the holder with a second statement, for
//     the [dlock.HeldError]. Dialects without RETURNING do the same
//     with an INSERT-if-absent, the same conditional UPDATE and a SELECT in
//     one transaction, unless they bring a one-statement [Dialect.Attempt]
//     (MySQL: INSERT … ON DUPLICATE KEY UPDATE with LAST_INSERT_ID).
//   - Release is one UPDATE, checked by owner, token and expiry: holds − 1,
//     and the owner cleared at zero (and the row deleted by the trigger).
//   - Renew is one UPDATE, checked the same way. RenewBatch renews many
//     holds in one transaction.
//   - A fair acquisition that must wait takes its place in the queue
//     after its refused attempt, without holding the lock's row; a fair
//     waiter's later attempt and the removal of its queue row on success
//     are one transaction.
//
// # Waking
//
// A waiter waits for a reason to try again, never for a fixed time. Before
// each look at the lock's state it takes two channels, and a change after
// the look closes one of them, so no change is missed:
//
//   - its own channel in the in-process [Local], which a release (or a
//     fair waiter leaving) in this process closes for one waiter only —
//     the fair waiter first in line, or the plain waiter that has waited
//     longest. That one tries at once; the others stay asleep instead of
//     all trying and all but one failing. If it gives up before trying,
//     the wake-up passes to the next.
//   - the current generation of the cross-process [Feed], closed when
//     another connection committed anything. Every waiter then needs a new
//     look, and one look per name and generation, kept in the Local,
//     serves all the waiters of the process, fair or not (the look does
//     not depend on the asker: it names the first live fair waiter). Of
//     the plain waiters that find the lock free, one tries (it claims the
//     name's baton); the others wait for its outcome. Without a Feed a
//     look serves the others for 20 ms.
//
// All statements of one name in one process take turns (with
// ConcurrentWrites: one turn per name), so a herd of waiters uses one
// connection per name and process. In session mode, one waiter per name
// and process waits in the server; the others wait for that turn in the
// process, holding no connection.
//
// If the look says the lock is still held, the wait is also bounded by
// the holder's remaining TTL as the database computed it (an expiry
// commits nothing, so no feed reports it), by the expiry of the first
// live fair waiter, and by the waiter's heartbeat; a shared look is not
// served past either expiry. Without a Feed, a
// waiter looks again at an interval that backs off from 5 ms to 100 ms.
//
// # Semaphores and read-write locks
//
// Lease mode grants [dlock.KindSemaphore] and [dlock.KindRWMutex] on
// dialects with a holders table ([Dialect.Weighted]; see [Engine.CanGrant]).
// The state of a weighted name:
//
//   - its lease row, whose owner is a mark longer than any owner a Client
//     gives (so no mutex holder can have it) that records the name's kind
//     and limit, whose token is the name's one counter (shared with the
//     mutex: the fence keeps it when the row is deleted), and whose
//     expires_at is the latest expiry of its live holders (0 while only
//     waiters are left). To the mutex's statements the row is held, or
//     expired with waiters queued: they never take it while a permit or a
//     waiter lives, and a refused mutex request reads the mark and fails
//     with a [dlock.ConflictError];
//   - the holders table (the lease table's name + "_holders"): a row per
//     holder with its owner, weight, reentry count, token and expiry;
//   - the waiters table, the same queue as fair mutex waiters: every
//     waiting weighted request is fair (the Client makes it so).
//
// Every operation is one transaction that locks the name's fence bucket
// (where writes are concurrent) and then its lease row, so the grant rule
// is one atomic step judged by the database's clock: the weights of the
// unexpired holders plus the request fit in the limit, and no live waiter
// is queued before the request (golang.org/x/sync's head-of-line rule).
// The same transaction deletes the name's expired holder rows, refuses a
// kind or limit other than the mark's while the name has holders or
// waiters, re-enters the owner's own row (same token, count + 1; more
// weight than it holds is [dlock.ErrUpgrade]), and grants with the lease
// row's token + 1. A refused request that will wait takes its queue row in
// the same transaction and keeps the mark while it waits; a refused
// request that will not wait writes nothing. A holder row edited into an
// impossible state (a weight outside 1..limit, weights above the limit, a
// count below 1, a token the counter never gave) is [dlock.ErrForeignData]
// and nothing is written.
//
// Release deletes the holder row at count zero and recomputes the lease
// row's expiry; the last holder with no waiter rows deletes the lease row.
// Renew extends the holder row and the lease row in one transaction;
// [Engine.Downgrade] lowers a holder's weight in place (a writer becomes a
// reader, its token unchanged, no other request in between).
//
// Waking: a release, a downgrade, a waiter that leaves, and the grant of a
// queued waiter (the next may fit too) wake the first waiter of the name:
// in this process through the [Local], in others through [Dialect.Wake]
// (PostgreSQL: a NOTIFY naming that waiter's queue row, sent only while a
// process listens) or, without it, the Feed (SQLite's data_version poll)
// or the waiters' backing-off looks (MySQL, as its fair mutex waiters). The
// first waiter also wakes when the first holder's lease ends, and the
// others when the first waiter's queue row may have died; a waiter whose
// process died drops out after [Config.WaiterTimeout], as a fair mutex
// waiter does.
//
// On MySQL each weighted transaction first takes the metadata locks of all
// the tables it writes, holding no row lock (see wstatements.pin), and
// [Migrate] creates the holders table only when it is missing: DDL on a
// table in use otherwise joins row locks and metadata locks in a cycle
// that MySQL does not detect.
//
// Tokens and fencing: every grant of any kind gets a token above every
// earlier grant's of the name. For a semaphore, a fence that stores the
// largest token it has seen and refuses smaller ones would refuse the
// other legal permit holders, so a fence can check only that a token is
// not below that of the last writer (read-write lock) or of a permit known
// to have expired; see the root package's docs.
//
// # Read-write locks in session mode
//
// Session mode grants [dlock.KindRWMutex], and [dlock.KindSemaphore] of
// limit 1 and [dlock.KindElection], where the database's advisory lock has
// a shared mode ([SessionDialect.Weighted]: PostgreSQL); where it is
// exclusive only (MySQL), the semaphores of 1 and elections. Each holder is a connection of
// its own that holds the name's advisory key — the mutex's key — shared
// (a reader, weight below the limit) or exclusive (a writer, a permit of
// a semaphore of 1), and the rows of lease mode: once the connection holds
// the key, the lease mode's weighted transaction grants on the rows (so a
// holder whose connection died is not followed before its lease has run
// out by the database's clock). The rules:
//
//   - Order (a writer is not starved): a waiting request waits in the
//     server's queue for the key, which is its arrival order (Acquire
//     returns once the server shows the request queued; every waiter
//     waits there, with no gate per process as the mutex has).
//     PostgreSQL's lock manager queues a new request behind any waiting
//     request it conflicts with, and its try functions refuse it then:
//     once a writer waits, a later reader waits behind it although only
//     readers hold — golang.org/x/sync's head-of-line rule — while readers
//     with no writer waiting share at once. The RWWriterNotStarved item
//     of dlocktest checks this against a real server.
//   - Tokens: every grant takes the lease row's token + 1, the name's one
//     counter, shared with the mutex and kept by the fence; a writer is
//     granted only after the readers before it released, so its token is
//     above theirs.
//   - Kind and limit: recorded in the lease row's owner (the mark of
//     weighted names) while the name has holders. A request whose try of
//     the key is refused reads the rows: another kind or limit, or a
//     mutex holder, is a [dlock.ConflictError] at once, not a wait; a
//     mutex request on a name held as a read-write lock finds the key
//     taken, reads the mark and gets the same. A
//     request that got the key and finds another kind on the rows (a
//     race) releases the key and gets the conflict.
//   - Re-entry: by owner, on the owner's session in this Backend (the
//     count plus one, same token; more weight than held is
//     [dlock.ErrUpgrade], so a reader asking to write never waits for
//     itself), or, for an owner holding through another Backend, on its
//     holder row alone.
//   - Downgrade ([Sessions.Downgrade]): the writer's connection takes the
//     key shared as well — PostgreSQL grants it at once, ahead of the
//     waiters, because they wait for this connection's own exclusive
//     hold — then lowers its holder row's weight, then releases the
//     exclusive hold. No writer comes in between; readers that were not
//     queued behind a waiting writer come in.
//   - Release: the rows first, then the key, so that a waiter the server
//     wakes finds the rows free. Renewal checks on the holder's
//     connection that it still holds the key in its mode (pg_locks) and
//     sets its idle_session_timeout to the TTL + 1 s, then renews the
//     rows. A connection that ends (the watcher sees its socket closed, a
//     renewal fails, or the TTL passes unrenewed) is a loss reported
//     through [dlock.LossReporter], as for the mutex; its rows stay until
//     they expire.
//   - Inspect reads the rows: one [dlock.LockInfo] per holder.
//
// Semaphores of N > 1 are refused ([Sessions.CanGrant]): an advisory lock
// is shared or exclusive and counts nothing. N slot keys with a gate key
// would keep the bound and the arrival order (the gate's holder takes w
// free slots), but a waiter can wait in the server for one chosen slot
// only, not for the first one freed, so a release would not wake the
// first waiter that now fits. MySQL's session lock (GET_LOCK) has no
// shared mode ([SessionWeighted.Exclusive]): its session mode runs the
// same path, exclusive only, for semaphores of 1 and elections, and
// refuses read-write locks. Lease mode grants them all on either database.
//
// # Elections and watching
//
// An election ([dlock.KindElection]) is granted in lease mode by the
// weighted path with limit 1: the lease row's mark records "election/1",
// the leader is the one holder row, and the holder row's value column
// keeps the leader's value (Request.Value at the grant; [Engine.Proclaim]
// replaces it with one UPDATE checked by owner, token and expiry, else
// [dlock.ErrLeaseLost]). Inspect returns it in LockInfo.Value with Kind
// election, so an Observe of a name held as a mutex (its row's owner is no
// mark) is refused, and a mutex request of an election's name, or a
// campaign on a mutex's, fails with a [dlock.ConflictError] writing
// nothing, as for the other weighted kinds. The term is the holder's
// token. The mutex's statements are untouched.
//
// The value column came with elections: [Migrate] adds it (ALTER TABLE …
// ADD COLUMN, with the dialect's [Dialect.AddValue]) to a holders table
// that has every other column, after it has checked every table of the
// set and before it creates anything; a holders table that is not dlock's
// is [dlock.ErrForeignData], naming it, and nothing is changed. Two
// processes that migrate at once: the second ALTER fails and is forgiven
// once the column is there.
//
// Session mode grants elections on the path of its semaphores of 1 (see
// "Read-write locks in session mode"), on PostgreSQL and MySQL: the
// leader's connection holds the name's advisory lock exclusive, and the
// weighted rows of lease mode carry the mark (so a mutex request of the
// name finds the lock taken, reads the mark and gets a
// [dlock.ConflictError] rather than queueing behind the leader), the term
// and the value, written by the grant's transaction. [Sessions.Proclaim]
// runs on the leader's connection: it checks that the connection still
// holds the advisory lock, then makes the UPDATE of lease mode there, so
// a leader whose connection ended cannot change the value (the check
// failing is a loss, reported at once). A leader whose connection the
// server ends is reported lost (PostgreSQL: within about 100 ms; MySQL:
// by its next renewal or Proclaim), and the next candidate, which waits
// in the server's queue, is elected once the old leader's holder row has
// expired by the database's clock — after the old lease's Deadline —
// with a higher term. The mutex's session statements are untouched.
//
// Watching ([Backend.Watch], [dlock.Watcher]) works in both modes, for
// every kind. A change this process makes (a grant returned by Acquire, a
// release, a downgrade, a proclaim) wakes its watches at once — an atomic
// load while nothing watches. Changes by other processes arrive by the
// store's own mechanism:
//
//   - PostgreSQL (over pgx): triggers on the lease table (an INSERT; an
//     UPDATE that changes the owner, the count or the token: a mutex's
//     grant, re-entry and release, in either mode) and on the holders
//     table (every change but a renewal) NOTIFY the lease table's channel
//     with "w:" + the name, but only when a row of the watchers table
//     (the lease table's name + "_watchers") names it. A watch subscribes
//     to the listening connection, then writes that row (name, the
//     listening connection's pid) under the listeners' advisory lock,
//     exclusive, which the triggers take shared: a change either commits
//     before the watch's first read or notifies. A renewal notifies
//     nothing, so a watched lock costs its holder nothing; an expiry
//     commits nothing, and the Client reads again when the first holder's
//     TTL runs out. When the listening connection is lost, notifications
//     may have been missed: every watch's Wait fails, and the Client
//     subscribes again on the new connection and reads the holders.
//     Rows of connections that are gone are deleted by the next listener.
//   - SQLite: the Feed (PRAGMA data_version on a pinned connection, 5 to
//     25 ms) signals every commit of another connection; spurious wake-ups
//     (other names) cost one read each.
//   - MySQL, and PostgreSQL over a driver other than pgx, have no push: a
//     watch reads again every [WatchPoll] (250 ms). This is the only
//     poll; it bounds how late a change in another process is seen.
package sqllock
