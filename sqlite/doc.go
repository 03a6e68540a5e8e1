// Package sqlite is dlock's embedded default backend: locks kept in an
// SQLite database file, shared by every process on one host that opens the
// same file. It needs no server and no cgo (it uses modernc.org/sqlite).
//
// [Open] opens a database file and returns a Backend that owns it; [New]
// works on a *sql.DB the caller keeps and closes. The URL scheme "sqlite"
// is registered with [dlock.Register], so that
// dlock.Open(ctx, "sqlite:///var/lib/myapp/locks.db") works with the
// package imported; see [ParseURL] and the examples.
//
// # Maximum TTL
//
// A TTL is sent as whole milliseconds (rounded up, without overflow) and
// added to the database's clock. The longest TTL is [dlock.MaxTTL] (24 h),
// the Client's ceiling: the lease table has no tighter limit of its own.
//
// # Guarantees
//
// Exclusion rests on SQLite's file locking and the database's clock: a
// grant is a row in a lease table written under SQLite's write lock, and
// its expiry is judged by the host's clock inside each statement. It holds
// between processes (and goroutines) on ONE host that open the same local
// file. It does not hold on network filesystems (NFS, SMB, most FUSE
// mounts): their locking and the shared memory that WAL mode needs are
// unreliable — use a server backend there. A step of the host's wall clock
// moves every lease's expiry with it: a forward step by more than a
// lease's remaining TTL makes it look expired at once, and the next
// acquirer takes it over (token + 1) while the first holder's Client still
// reports its lease valid until its next renewal fails (within TTL/3, at
// the latest at [dlock.Lease.Deadline]); for that time two owners believe
// they hold the lock, and only a resource that checks fencing tokens
// rejects the older one. A backward step lengthens every lease by the
// step. Fencing tokens strictly increase per
// lock name for the life of the file (see State kept, below);
// with the default synchronous=FULL they survive power loss as well as
// crashes. As everywhere in dlock, a process that is paused past its
// lease can still act on it: pass [dlock.Lease.Token] to the resource.
//
// SQLite keeps any value in any column. Rows that dlock did not write — a
// token, count or expiry that is not an integer, a token at 2^63-1 (which
// has no successor: SQLite would turn token + 1 into a REAL), a count out
// of range, an owner without holds or holds without an owner, waiter rows
// with no owner or an expiry that is not an integer — are never taken over
// or re-entered: TryLock and Lock fail with dlock.ErrForeignData naming
// the table and row, nothing is written, and Inspect (`dlock status`)
// lists them with LockInfo.Bad.
//
// # State kept, and for how long
//
// While held: one lease row . While waited on: the row, plus one waiter row
// per fair waiter (refreshed while it waits; a dead waiter's row expires
// after the waiter timeout); plain waiters keep nothing in the database.
// After release: nothing — the releasing statement deletes the row when no
// waiter row has its name (a trigger, so the release stays one
// UPDATE). A holder that died leaves its row until it expires; then
// the next sweep deletes it (one acquisition or release in 64 of each
// Backend sweeps up to 256 expired or free rows and 256 expired waiter
// rows, and keeps sweeping while it finds full batches), so a killed
// holder's 10,000 rows are gone after about 64 + 40 operations of any
// Backend on the table. [Backend.Reclaim] sweeps at once. Tokens: the
// fence table ("dlock_locks_fence", one row: SQLite writes one transaction
// at a time) keeps the largest token of the deleted rows; an AFTER DELETE
// trigger raises it in the deleting statement, and a new row's token is
// the mark + 1. So tokens of a
// name strictly increase for the life of the tables, as long as every
// process runs this version (an older one would start a reclaimed name at
// token 1) and the triggers stay. [Migrate] adds the fence table to a
// table of an earlier version, its marks at the largest token there.
//
// # Opening
//
// [Open] creates the file if needed (its directory must exist) and sets,
// on every connection, busy_timeout (default 5s: a writer waits for
// another process's write instead of failing) and synchronous (default
// FULL); it switches the file to WAL mode (persistent in the file), so that
// readers never block the writer. Transactions that write start with
// BEGIN IMMEDIATE, taking the write lock at once: a transaction that read
// first and then tried to write could fail with SQLITE_BUSY in WAL mode
// whatever the busy timeout, and a single statement writes from its
// start anyway. Within one process, writes to one file are queued in Go
// rather than in SQLite's busy handler. [New] uses a *sql.DB that the
// caller opened (with any SQLite driver whose errors have a Code() int
// method, as modernc.org/sqlite's do; SQLite 3.35 or later); for use by
// several processes, open it with busy_timeout set and WAL mode, e.g.
// "file:/path/locks.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
//
// The tables are created on first use (see [Migrate]): the lease table,
// "dlock_locks" unless the [Table] option names another, and its fair
// queue "dlock_locks_waiters". The statements are those of the shared SQL
// engine: one conditional upsert (INSERT … ON CONFLICT DO UPDATE … WHERE …
// RETURNING) per acquisition, one UPDATE per release and per renewal,
// and one transaction for a batch of renewals.
//
// # URLs
//
// The package registers the "sqlite" scheme with [dlock.Register]:
//
//	sqlite:///abs/path/locks.db   an absolute path
//	sqlite:relative/locks.db      a path relative to the working directory
//	sqlite://./relative/locks.db  the same ("." or ".." as the host)
//
// with options as query parameters: table=NAME, busy_timeout=DURATION,
// waiter_timeout=DURATION, synchronous=FULL|NORMAL|EXTRA, connect_timeout=DURATION
// (see [ConnectTimeout]), e.g.
// "sqlite:///var/lib/app/locks.db?table=app_locks&busy_timeout=10s".
// Any other host, parameter or value is [dlock.ErrInvalidOption].
//
// # Waking waiters
//
// A waiting Lock is woken, not left to sleep:
//
//   - by a release in the same process at once: every Backend of the
//     process on the same file and table shares the in-process state, and
//     a release wakes the one waiter next in line (the first fair waiter,
//     or the plain waiter that has waited longest) rather than all of
//     them;
//   - by a commit of another process within a few milliseconds: while the
//     process has waiters on a file, one goroutine polls PRAGMA
//     data_version on a connection of its own. The value changes whenever
//     another connection commits, and reading it costs microseconds and no
//     disk I/O in WAL mode (it is read from the shared-memory WAL index).
//     It polls 5 ms after a change and backs off to 25 ms while nothing
//     changes: a hand-off between processes costs a poll interval, and a
//     quiet waiting process some 40 cheap polls a second — where a file
//     watch (inotify) would not be portable and a notification service
//     would need a server, which this backend exists to avoid. The
//     goroutine stops with the last waiter. After a change, one read of a
//     lock's state serves all the process's waiters on it, and only those
//     that may take the lock try;
//   - by the holder's lease running out: an expiry commits nothing, so
//     every wait is also bounded by the holder's remaining TTL as the
//     database computes it.
//
// # Fair mode
//
// With [dlock.Fair], a waiter that finds the lock held takes a place in the
// waiters table (an AUTOINCREMENT sequence); only the live waiter with the
// lowest sequence may take a free lock while fair waiters are queued, so
// grants follow arrival order. The rows of a process's waiters are
// refreshed together (one UPDATE per 256) every third of the waiter
// timeout (default 5s, [WaiterTimeout]) while they wait; the row of a process that died drops
// out after the timeout, and a waiter that gives up deletes its row at
// once.
package sqlite
