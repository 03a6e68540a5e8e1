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
package sqllock
