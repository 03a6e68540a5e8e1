// Package sqlite is dlock's embedded default backend: locks kept in an
// SQLite database file, shared by every process on one host that opens the
// same file. It needs no server and no cgo (it uses modernc.org/sqlite).
//
//	b, err := sqlite.Open("/var/lib/myapp/locks.db")
//	c, err := dlock.New(b)
//
// or, with the package imported, dlock.Open(ctx, "sqlite:///var/lib/myapp/locks.db").
//
// # Guarantee
//
// Exclusion rests on SQLite's file locking and the database's clock: a
// grant is a row in a lease table written under SQLite's write lock, and
// its expiry is judged by the host's clock inside each statement. It holds
// between processes (and goroutines) on ONE host that open the same local
// file. It does not hold on network filesystems (NFS, SMB, most FUSE
// mounts): their locking and the shared memory that WAL mode needs are
// unreliable — use a server backend there. A step of the host's wall clock
// moves every lease's expiry with it. Fencing tokens come from a counter
// per lock name that is kept in the same row for the life of the file;
// with the default synchronous=FULL they survive power loss as well as
// crashes. As everywhere in dlock, a process that is paused past its
// lease can still act on it: pass [dlock.Lease.Token] to the resource.
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
// waiter_timeout=DURATION, synchronous=FULL|NORMAL|EXTRA, e.g.
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
// waiters table (an AUTOINCREMENT sequence) in the same transaction as its
// attempt; only the live waiter with the lowest sequence may take a free
// lock while fair waiters are queued, so grants follow arrival order. A
// waiter refreshes its row every third of the waiter timeout (default 5s,
// [WaiterTimeout]) while it waits; the row of a process that died drops
// out after the timeout, and a waiter that gives up deletes its row at
// once.
package sqlite
