// Package sqlite is dlock's embedded default backend: locks kept in an
// SQLite database file, shared by every process on one host that opens the
// same file. It needs no server and no cgo (it uses modernc.org/sqlite).
//
// [Open] opens a database file and returns a Backend that owns it; [New]
// works on a *sql.DB the caller keeps and closes (any SQLite driver whose
// errors have a Code() int method, SQLite 3.35 or later). The details of
// everything below are in docs/backends/sqlite.md,
// https://github.com/dlock-dev/dlock/blob/main/docs/backends/sqlite.md.
//
// # URL
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
// Any other host, parameter or value is [dlock.ErrInvalidOption]; see
// [ParseURL] and the examples.
//
// # Guarantees
//
//   - Exclusion rests on SQLite's file locking and the host's clock: it
//     holds between processes (and goroutines) on ONE host that open the
//     same local file. It does not hold on network filesystems (NFS, SMB,
//     most FUSE mounts): use a server backend there.
//   - Fencing tokens strictly increase per lock name for the life of the
//     file (a fence row keeps the marks of deleted rows, as long as every
//     process runs this version and the triggers stay); with the default
//     synchronous=FULL they survive power loss as well as crashes. A new
//     file's tokens start at the host's clock in microseconds since the
//     Unix epoch (about 1.8e15, below 2^53, so exact in JSON numbers until
//     the year 2255), so that the tokens of a file deleted and created
//     again stay above the old file's, as long as the clock did not go
//     back and the old file gave fewer grants than microseconds passed
//     between the two creations (SQLite commits one transaction at a
//     time: a grant and release took 156 µs with synchronous=NORMAL and
//     0.9 ms with FULL, 8 goroutines on 2 cores, far from one grant per
//     µs). A file restored from a backup is not covered.
//   - The file is the lock. Deleting or replacing it while it is in use
//     (rm locks.db) makes a second owner possible: processes that had it
//     open keep using the old file, which a new Open no longer sees.
//     Every Backend therefore checks, before each renewal, release and
//     acquisition, that its path still names the file it opened (device
//     and inode): a holder learns at its next renewal that its lease is
//     lost (dlock.ErrLeaseLost, so the lease ends), and its other
//     acquisitions fail with dlock.ErrBackendUnavailable until it is
//     opened again.
//   - A step of the host's wall clock is not safe: a forward step longer
//     than a lease's remaining TTL lets a second owner in until the first
//     holder's next renewal fails; only a resource that checks fencing
//     tokens rejects the older one. A backward step lengthens every lease.
//   - The longest TTL is [dlock.MaxTTL] (24 h). Rows dlock did not write
//     (SQLite keeps any value in any column) are never taken over: locking
//     them fails with dlock.ErrForeignData, and Inspect lists them with
//     LockInfo.Bad.
//
// # How it works
//
// [Open] creates the file if needed (its directory must exist), switches
// it to WAL mode and sets busy_timeout (default 5s) and synchronous
// (default FULL) on every connection; writes start with BEGIN IMMEDIATE.
// Open [New]'s *sql.DB with busy_timeout and WAL mode for use by several
// processes. A grant is one conditional upsert, a release and a renewal
// one UPDATE; a release deletes the freed row, and one operation in 64
// sweeps expired rows ([Backend.Reclaim] sweeps at once).
//
// A release wakes the next waiter of the same process at once; a commit
// of another process is seen within a few milliseconds by polling PRAGMA
// data_version (5 ms, backing off to 25 ms, only while there are
// waiters); every wait is also bounded by the holder's remaining lease.
// With [dlock.Fair], waiters queue in the waiters table in arrival order,
// refreshed every third of the waiter timeout ([WaiterTimeout]); a dead
// process's waiters drop out after it.
//
// # Elections and watching
//
// Elections ([dlock.Client.Election]) are granted as a holder row with
// the leader's value (the holders table's value column, which [Migrate]
// adds to a table made before). A watch ([dlock.Client.Watch], Observe,
// `dlock status --watch`) wakes on the same data_version check as the
// waiters (any commit by another connection: a read of the name follows)
// and at once after a change made by this process; an in-memory
// database, which has no such check, reads again every 250 ms.
//
// # Clearing a stuck lock
//
// Never delete the file (see Guarantees). A lock whose holder died frees
// itself when its TTL runs out; `dlock status` shows the holder and the
// time left. To free one at once, stop its holder first (it would go on
// believing it holds the lock until its next renewal), then delete its row:
//
//	sqlite3 locks.db "DELETE FROM dlock_locks WHERE name = 'NAME'"
//
// (the table is dlock_locks unless the Table option says otherwise). The
// row's token is kept in the fence table by a trigger, so the next grant's
// token is still greater.
package sqlite
