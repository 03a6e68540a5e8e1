package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"

	"github.com/dlock-dev/dlock"
)

// Querier runs statements: the engine's pool of prepared statements, or a
// *sql.Conn in a transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Dialect describes what differs between databases. The engine writes every
// statement once, with "?" placeholders and the column names of the lease
// and waiters tables; a Dialect supplies the rest.
type Dialect struct {
	// Name names the database in messages, e.g. "sqlite".
	Name string

	// Rebind rewrites a statement's "?" placeholders into the driver's
	// syntax (PostgreSQL: $1, $2, …). nil keeps "?". Statements contain no
	// "?" other than placeholders.
	Rebind func(query string) string

	// Now is an SQL expression for the database's current time as an
	// integer number of milliseconds since the Unix epoch. It must be the
	// same value wherever it appears in one statement.
	Now string

	// Max is the SQL function returning the larger of two integers:
	// "max" (SQLite), "GREATEST" (PostgreSQL, MySQL).
	Max string

	// Interruptible says that a statement may be interrupted (its
	// connection dropped, which the server sees as a disconnect) once its
	// caller's context ended [InterruptGrace] ago: a server across a
	// network, whose link may go silent. SQLite leaves it false: its
	// statements are bounded by the busy timeout, and an interrupted
	// connection is discarded with its prepared statements (and an
	// in-memory database with it).
	Interruptible bool

	// ConcurrentWrites says that the database runs writing statements of
	// many connections at once, each waiting only for the rows it locks
	// (PostgreSQL, InnoDB): the engine then sends them as they come.
	// Without it (SQLite: one writer per database) the engine queues a
	// process's writes in Go, one at a time, rather than in the
	// database's busy handler.
	ConcurrentWrites bool

	// Returning says the database has INSERT … ON CONFLICT (col) DO UPDATE
	// SET … WHERE … and RETURNING on INSERT and UPDATE. Without it the
	// engine runs a transaction where one statement would do.
	Returning bool

	// WritableCTE says the database runs an INSERT and a DELETE in the
	// WITH clause of one statement (PostgreSQL): a fair waiter's grant
	// and the removal of its queue row are then one statement, not a
	// transaction of four round trips. It requires Returning.
	WritableCTE bool

	// Begin starts a transaction that writes. It must take the write lock
	// at once where the database would otherwise fail a later upgrade from
	// reading to writing (SQLite: "BEGIN IMMEDIATE").
	Begin string

	// InsertIgnore starts an INSERT that does nothing when the key exists:
	// "INSERT OR IGNORE INTO" (SQLite), "INSERT IGNORE INTO" (MySQL). Only
	// dialects without Returning need it.
	InsertIgnore string

	// Schema returns the statements that create the lease table locks and
	// the waiters table waiters (with an index on waiters (name, seq)) if
	// they do not exist. They run in one transaction begun with Begin. The
	// lease table's name column must order bytewise (PostgreSQL: COLLATE
	// "C"): Inspect relies on it.
	Schema func(locks, waiters string) []string

	// Buckets is the number of rows of the fence table (see the package
	// doc): names are spread over them by Bucket, so that acquisitions of
	// distinct names rarely wait for one another on a fence row. 1 for a
	// database that writes one transaction at a time (SQLite).
	Buckets int

	// Bucket returns an SQL expression for the fence bucket, in
	// 0..Buckets-1, of the name that the SQL expression name gives.
	Bucket func(name string) string

	// MarkLock is appended to the SELECT (over the fence table, alias f)
	// that gives a new lease row its token, to read the latest committed
	// mark and keep it until the statement ends: PostgreSQL "FOR SHARE OF
	// f". Empty where the read is current anyway (SQLite: one writer).
	MarkLock string

	// FenceFirst makes the statements that may delete a lease row lock
	// the row's fence bucket first (FOR UPDATE in their WHERE), so that a
	// deletion takes the two locks in the same order as an acquisition
	// that reads the mark with MarkLock. PostgreSQL needs it: it finds a
	// deadlock only after deadlock_timeout (1 s by default).
	FenceFirst bool

	// Reclaim returns the statements, run after Schema in the same
	// transaction, that create the fence table fence (bucket, mark) and
	// the triggers: a deletion of a lease row of dlock's (see [RowOK])
	// raises its bucket's mark to the row's token, whoever deletes it;
	// where the database allows (not MySQL, whose triggers cannot change
	// their own table), a lease row freed by an UPDATE while no waiter row
	// has its name is deleted. They must be idempotent.
	Reclaim func(locks, waiters, fence string) []string

	// DeleteFreed says that Reclaim's triggers do not delete a freed
	// row (MySQL): a release first tries to delete the row (its last hold,
	// no waiter rows) and, if that matched nothing, updates it as usual.
	// The last release is one statement; an inner one, or one with
	// waiters queued, is two.
	DeleteFreed bool

	// FenceTx makes deletions of lease rows run in a transaction that
	// first locks the fence rows they may raise (SELECT … FOR UPDATE), so
	// that they take the locks in the same order as an acquisition, which
	// reads its bucket's row locked (MySQL's INSERT … SELECT). Without it
	// an acquisition and a deletion of one name deadlock, and InnoDB rolls
	// back the one that changed less: the acquisition.
	FenceTx bool

	// DeleteLimit says the database has DELETE … LIMIT n but cannot
	// select from the table it deletes from in a subquery (MySQL).
	DeleteLimit bool

	// Attempt, if set, makes one conditional grant (see the package doc)
	// in a statement of the dialect's own instead of the engine's generic
	// ones, on q: the pool, or a connection in a transaction. It reports
	// whether the grant was made. MySQL uses it for a one-statement
	// acquisition without RETURNING.
	Attempt func(ctx context.Context, q Querier, table string, req dlock.Request, ttlMillis, seq int64) (dlock.Grant, bool, error)

	// MaxToken is the largest fencing token the dialect stores and hands
	// out; 0 means math.MaxInt64 (a signed 64-bit column). A row whose
	// token is at it is foreign data: no later token could be given.
	MaxToken int64

	// IsInteger, if set, returns an SQL condition that holds when the
	// value of expr is stored as an integer, for databases that keep any
	// value in any column (SQLite: typeof(expr) = 'integer'). Rows whose
	// integer columns hold anything else are foreign data.
	IsInteger func(expr string) string

	// FenceFloor, if set, returns the least mark of a fence row when it
	// is created: the tokens of new names then start above it. The sqlite
	// backend's is the clock in microseconds, so that a database file
	// deleted and created again gives tokens above those of the old file
	// (see its package doc). nil is 0.
	FenceFloor func() int64

	// Tables, if set, returns the tables of the dialect's own that its
	// statements on lease table locks use (PostgreSQL's listeners table),
	// which [Check] and [Migrate] check like the others.
	Tables func(locks string) []Table

	// Missing reports whether a statement's error says that its table
	// does not exist (rather than that it lacks a column).
	Missing func(error) bool

	// Denied, if set, reports whether a statement's error says that the
	// user lacks a privilege on its table. A dialect with it has its
	// privileges checked by [Check] and [Migrate] (see [Tables]).
	Denied func(error) bool

	// Weighted, if set, returns the statements that create the holders
	// table holders (name, owner, weight, holds, token, expires_at, value;
	// primary key (name, owner); an index on expires_at) of lease table
	// locks, and whatever Wake calls. They must be idempotent; Migrate runs
	// them in one transaction after Reclaim's. nil: the dialect grants
	// mutexes only.
	Weighted func(locks, waiters, holders string) []string

	// AddValue returns the statements that complete a holders table made
	// before elections, which lacks the value column (an election
	// leader's value): an ALTER TABLE that adds it, and what Weighted
	// creates that depends on it. Migrate runs them when the table has
	// the other columns but not that one. Required with Weighted.
	AddValue func(locks, waiters, holders string) []string

	// Wake, if set, returns a statement (argument: a name) that wakes the
	// first live fair waiter of the name in other processes (PostgreSQL:
	// a NOTIFY naming it). Weighted operations run it in their
	// transaction where a change may let that waiter in. nil: other
	// processes see the change through their Feed, or by looking again.
	Wake func(locks string) string

	// Classify sorts a database error: whether trying again may succeed
	// (the database was locked or busy: nothing was done), whether the
	// database cannot be reached, or neither.
	Classify func(error) ErrorClass
}

// ErrorClass is how a [Dialect] classifies a database error.
type ErrorClass int

const (
	// Other is an error that is neither of the others: a bug, a schema
	// that does not match, a constraint.
	Other ErrorClass = iota
	// Retry is an error after which nothing was done and the same
	// statement may succeed later: SQLITE_BUSY, a lock wait timeout, a
	// deadlock victim.
	Retry
	// Unavailable is an error that says the database cannot be reached or
	// used: it is reported as [dlock.ErrBackendUnavailable].
	Unavailable
)

// SQLite is the dialect of SQLite 3.35 or later (for RETURNING), through
// modernc.org/sqlite or any driver whose errors have a Code() int method
// returning the (extended) SQLite result code.
var SQLite = Dialect{
	Name: "sqlite",
	// julianday('now') holds the VFS's millisecond clock; ROUND undoes the
	// floating-point conversion exactly. It is fixed for one sqlite3_step,
	// which covers a whole UPDATE and the changes of a RETURNING statement.
	Now:          "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
	Max:          "max",
	Returning:    true,
	Begin:        "BEGIN IMMEDIATE",
	InsertIgnore: "INSERT OR IGNORE INTO",
	Schema:       sqliteSchema,
	IsInteger:    sqliteIsInteger,
	Classify:     classifySQLite,
	Missing:      func(err error) bool { return strings.Contains(err.Error(), "no such table") },
	// One writer at a time: one fence row serves all names.
	Buckets:  1,
	Bucket:   func(name string) string { return "(0 * length(" + name + "))" },
	Reclaim:  sqliteReclaim,
	Weighted: sqliteWeighted,
	AddValue: func(_, _, holders string) []string {
		return []string{`ALTER TABLE ` + holders + ` ADD COLUMN value TEXT NOT NULL DEFAULT ''`}
	},
}

// sqliteWeighted creates SQLite's holders table (see Dialect.Weighted).
func sqliteWeighted(_, _, holders string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + holders + ` (
	name       TEXT    NOT NULL,
	owner      TEXT    NOT NULL,
	weight     INTEGER NOT NULL,
	holds      INTEGER NOT NULL,
	token      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	value      TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (name, owner)
) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS ` + holders + `_expires ON ` + holders + ` (expires_at)`,
	}
}

func sqliteIsInteger(expr string) string { return "typeof(" + expr + ") = 'integer'" }

// sqliteReclaim creates SQLite's fence table and triggers (see
// Dialect.Reclaim).
func sqliteReclaim(locks, waiters, fence string) []string {
	ok := RowOK(Dialect{IsInteger: sqliteIsInteger}, "OLD")
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + fence + ` (
	bucket INTEGER NOT NULL PRIMARY KEY,
	mark   INTEGER NOT NULL
)`,
		`CREATE TRIGGER IF NOT EXISTS ` + locks + `_fence AFTER DELETE ON ` + locks + `
WHEN ` + ok + `
BEGIN
	UPDATE ` + fence + ` SET mark = max(mark, OLD.token) WHERE bucket = 0;
END`,
		`CREATE TRIGGER IF NOT EXISTS ` + locks + `_reclaim AFTER UPDATE OF owner ON ` + locks + `
WHEN OLD.owner <> '' AND NEW.owner = '' AND NEW.holds = 0
	AND NOT EXISTS (SELECT 1 FROM ` + waiters + ` w WHERE w.name = NEW.name)
BEGIN
	DELETE FROM ` + locks + ` WHERE name = NEW.name AND owner = '' AND holds = 0;
END`,
	}
}

func sqliteSchema(locks, waiters string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + locks + ` (
	name       TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL DEFAULT '',
	holds      INTEGER NOT NULL DEFAULT 0,
	token      INTEGER NOT NULL DEFAULT 0,
	expires_at INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID`,
		// AUTOINCREMENT: a sequence number is never reused, even after the
		// last waiter left.
		`CREATE TABLE IF NOT EXISTS ` + waiters + ` (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	name       TEXT    NOT NULL,
	owner      TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ` + waiters + `_name ON ` + waiters + ` (name, seq)`,
	}
}

// SQLite primary result codes (the low byte of an extended code).
const (
	sqlitePerm     = 3
	sqliteBusy     = 5
	sqliteLocked   = 6
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteCorrupt  = 11
	sqliteFull     = 13
	sqliteCantOpen = 14
	sqliteProtocol = 15
	sqliteNotADB   = 26
)

func classifySQLite(err error) ErrorClass {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		switch coder.Code() & 0xff {
		case sqliteBusy, sqliteLocked, sqliteProtocol:
			return Retry
		case sqlitePerm, sqliteReadOnly, sqliteIOErr, sqliteCorrupt, sqliteFull, sqliteCantOpen, sqliteNotADB:
			return Unavailable
		}
		return Other
	}
	return ClassifyCommon(err)
}

// ClassifyCommon classifies the errors of database/sql itself; dialects
// fall back to it.
func ClassifyCommon(err error) ErrorClass {
	switch {
	case errors.Is(err, driver.ErrBadConn):
		return Retry
	case errors.Is(err, sql.ErrConnDone), strings.Contains(err.Error(), "sql: database is closed"):
		return Unavailable
	}
	return Other
}
