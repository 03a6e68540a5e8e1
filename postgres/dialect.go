package postgres

import (
	"errors"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgDialect is the dialect of PostgreSQL 12 or later through pgx
// (github.com/jackc/pgx/v5/stdlib). now() is the start of the transaction
// (of the statement, outside one): the same value everywhere in a
// statement, and never later than the moment a statement that waited for
// a row lock acts, so a take-over judged by it is never early.
//
// Its Schema also creates a trigger that sends NOTIFY on the channel of
// the lease table (see channel) whenever a lock is freed (its owner cleared) or a fair
// waiter leaves the queue of a lock that is not held: the release stays one statement, and waiters in
// other processes LISTEN instead of polling. The statements run under a
// transaction-level advisory lock, so that processes that start at once
// do not race on the catalog.
var pgDialect = sqllock.Dialect{
	Name:        "postgres",
	Rebind:      rebindDollar,
	Now:         pgNow,
	Max:         "GREATEST",
	Returning:   true,
	WritableCTE: true,
	// A statement whose server stopped answering is given up on.
	Interruptible:    true,
	ConcurrentWrites: true,
	Begin:            "BEGIN",
	Schema:           postgresSchema,
	Classify:         classifyPostgres,
	Buckets:          pgBuckets,
	Bucket:           pgBucket,
	// The mark is read locked, so that an acquisition that waited for a
	// deletion of its name's row sees the mark that the deletion raised.
	MarkLock:   "FOR SHARE OF f",
	FenceFirst: true,
	Reclaim:    postgresReclaim,
	Tables: func(locks string) []sqllock.Table {
		// Every release's trigger reads it; a listening connection
		// registers in it.
		return []sqllock.Table{{Name: listenersTable(locks), Columns: "pid, started",
			Privileges: []string{"INSERT", "UPDATE", "DELETE"}},
			// Every grant's and release's trigger reads it; a watch
			// registers in it.
			{Name: watchersTable(locks), Columns: "name, pid",
				Privileges: []string{"INSERT", "DELETE"}, Optional: true}}
	},
	Missing:  func(err error) bool { return pgCode(err) == "42P01" }, // undefined_table
	Denied:   func(err error) bool { return pgCode(err) == "42501" }, // insufficient_privilege
	Weighted: postgresWeighted,
	AddValue: func(locks, waiters, holders string) []string {
		return append([]string{`ALTER TABLE ` + holders + ` ADD COLUMN IF NOT EXISTS value TEXT NOT NULL DEFAULT ''`},
			postgresWeighted(locks, waiters, holders)...)
	},
	Wake: func(locks string) string { return `SELECT ` + locks + `_wake(?::text)` },
}

// postgresWeighted creates the holders table and the function of Wake:
// under the listeners' lock (as the NOTIFY trigger, see postgresSchema) it
// notifies the sequence of the name's first live fair waiter, whose turn
// it is, and nothing when none is queued or nobody listens.
func postgresWeighted(locks, waiters, holders string) []string {
	ch := channel(locks)
	return []string{
		`SELECT pg_advisory_xact_lock(hashtext('dlock schema ' || '` + ch + `'))`,
		`CREATE TABLE IF NOT EXISTS ` + holders + ` (
	name       TEXT COLLATE "C" NOT NULL,
	owner      TEXT    NOT NULL,
	weight     INTEGER NOT NULL,
	holds      INTEGER NOT NULL,
	token      BIGINT  NOT NULL,
	expires_at BIGINT  NOT NULL,
	value      TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (name, owner)
)`,
		`CREATE INDEX IF NOT EXISTS ` + holders + `_expires ON ` + holders + ` (expires_at)`,
		// Watchers learn of every change of a holder but its expiry
		// (see watchTriggers).
		`DO $d$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + holders + `'::regclass AND tgname = 'dlock_watch_ins') THEN
		CREATE TRIGGER dlock_watch_ins AFTER INSERT OR DELETE ON ` + holders + ` FOR EACH ROW EXECUTE FUNCTION ` + locks + `_watched();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + holders + `'::regclass AND tgname = 'dlock_watch_upd') THEN
		CREATE TRIGGER dlock_watch_upd AFTER UPDATE ON ` + holders + ` FOR EACH ROW
			WHEN (OLD.weight <> NEW.weight OR OLD.holds <> NEW.holds OR OLD.value <> NEW.value) EXECUTE FUNCTION ` + locks + `_watched();
	END IF;
END
$d$`,
		`CREATE OR REPLACE FUNCTION ` + locks + `_wake(n TEXT) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
	s TEXT;
BEGIN
	PERFORM pg_advisory_xact_lock_shared(` + listenKey(ch) + `);
	IF current_setting('transaction_isolation') = 'read committed'
		AND NOT EXISTS (SELECT 1 FROM ` + listenersTable(locks) + `) THEN
		RETURN;
	END IF;
	SELECT w.seq::text INTO s FROM ` + waiters + ` w
		WHERE w.name = n COLLATE "C" AND w.expires_at > ` + pgNow + ` AND w.owner <> '' AND w.expires_at >= 0
		ORDER BY w.seq LIMIT 1;
	IF s IS NOT NULL THEN
		PERFORM pg_notify('` + ch + `', s);
	END IF;
END
$f$`,
	}
}

// pgCode returns the SQLSTATE of a server's error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// pgNow is the database's clock in milliseconds since the Unix epoch.
const pgNow = "(floor(extract(epoch from now()) * 1000)::bigint)"

// pgBuckets is the number of fence rows: acquisitions of names in
// different buckets never wait for one another there.
const pgBuckets = 64

// pgBucket is the fence bucket of a name: the first byte of its SHA-256.
func pgBucket(name string) string {
	return "(get_byte(sha256(convert_to(" + name + ", 'UTF8')), 0) % " + strconv.Itoa(pgBuckets) + ")"
}

// postgresReclaim creates the fence table and its triggers: a deleted
// row of dlock's raises its bucket's mark to its token, and a row freed
// by an UPDATE with no waiter rows for its name is deleted (at the end of
// that statement, in its transaction).
func postgresReclaim(locks, waiters, fence string) []string {
	fn := locks + "_fence"
	rc := locks + "_reclaim"
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + fence + ` (
	bucket INTEGER NOT NULL PRIMARY KEY,
	mark   BIGINT  NOT NULL
)`,
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF ` + sqllock.RowOK(sqllock.Dialect{}, "OLD") + ` THEN
		UPDATE ` + fence + ` SET mark = GREATEST(mark, OLD.token) WHERE bucket = ` + pgBucket("OLD.name") + `;
	END IF;
	RETURN NULL;
END
$f$`,
		`CREATE OR REPLACE FUNCTION ` + rc + `() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM ` + waiters + ` w WHERE w.name = NEW.name) THEN
		DELETE FROM ` + locks + ` WHERE name = NEW.name AND owner = '' AND holds = 0;
	END IF;
	RETURN NULL;
END
$f$`,
		`DO $d$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + locks + `'::regclass AND tgname = '` + strings.ToLower(fn) + `') THEN
		CREATE TRIGGER ` + fn + ` AFTER DELETE ON ` + locks + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + locks + `'::regclass AND tgname = '` + strings.ToLower(rc) + `') THEN
		CREATE TRIGGER ` + rc + ` AFTER UPDATE ON ` + locks + ` FOR EACH ROW
			WHEN (OLD.owner <> '' AND NEW.owner = '' AND NEW.holds = 0) EXECUTE FUNCTION ` + rc + `();
	END IF;
END
$d$`,
	}
}

// channel returns the NOTIFY channel of lease table table: its
// name in lower case, as PostgreSQL folds unquoted identifiers.
func channel(table string) string { return strings.ToLower(table) }

// rebindDollar turns the i-th "?" into $i.
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func postgresSchema(locks, waiters string) []string {
	ch := channel(locks)
	fn := locks + "_notify"
	return append([]string{
		// One creator at a time: CREATE … IF NOT EXISTS is not safe
		// against a concurrent creation of the same name in PostgreSQL.
		`SELECT pg_advisory_xact_lock(hashtext('dlock schema ' || '` + ch + `'))`,
		`CREATE TABLE IF NOT EXISTS ` + locks + ` (
	name       TEXT COLLATE "C" NOT NULL PRIMARY KEY,
	owner      TEXT   NOT NULL DEFAULT '',
	holds      INTEGER NOT NULL DEFAULT 0,
	token      BIGINT NOT NULL DEFAULT 0,
	expires_at BIGINT NOT NULL DEFAULT 0
)`,
		`CREATE TABLE IF NOT EXISTS ` + waiters + ` (
	seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name       TEXT COLLATE "C" NOT NULL,
	owner      TEXT   NOT NULL,
	expires_at BIGINT NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ` + waiters + `_name ON ` + waiters + ` (name, seq)`,
		`CREATE TABLE IF NOT EXISTS ` + listenersTable(locks) + ` (
	pid     INTEGER NOT NULL PRIMARY KEY,
	started TIMESTAMPTZ NOT NULL
)`,
		// Nothing is sent while no connection listens on the channel
		// (none has a row in the listeners table: see register). A fair
		// waiter that leaves while the lock is held (the one just granted
		// it, or one that gave up) wakes nobody: those behind it wait for
		// the holder's release, which notifies. The payload is
		// the sequence of the first live fair waiter of the name, whose
		// turn it is (only its process acts on it), or '' when none is
		// queued (every waiter looks); a row that is not dlock's (see
		// the engine's waiterOK, as in its state) is nobody's turn.
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	n TEXT COLLATE "C"; -- as the name columns
BEGIN
	IF TG_OP = 'DELETE' THEN
		n := OLD.name;
	ELSE
		n := NEW.name;
	END IF;
	-- Nobody listens: no NOTIFY, whose commit would wait for every
	-- other notifying commit of the server. The lock is shared with the
	-- other notifiers, exclusive for a listener that registers; the
	-- table is read after it is granted, which only READ COMMITTED
	-- does (a snapshot per statement): otherwise notify anyway.
	PERFORM pg_advisory_xact_lock_shared(` + listenKey(ch) + `);
	IF current_setting('transaction_isolation') = 'read committed'
		AND NOT EXISTS (SELECT 1 FROM ` + listenersTable(locks) + `) THEN
		RETURN NULL;
	END IF;
	IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM ` + locks + ` l WHERE l.name = n
		AND l.owner <> '' AND l.holds > 0 AND l.expires_at > ` + pgNow + `) THEN
		RETURN NULL;
	END IF;
	PERFORM pg_notify('` + ch + `', COALESCE((SELECT w.seq::text FROM ` + waiters + ` w
		WHERE w.name = n AND w.expires_at > ` + pgNow + ` AND w.owner <> '' AND w.expires_at >= 0
		ORDER BY w.seq LIMIT 1), ''));
	RETURN NULL;
END
$f$`,
		`DO $d$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + locks + `'::regclass AND tgname = '` + strings.ToLower(locks) + `_freed') THEN
		CREATE TRIGGER ` + locks + `_freed AFTER UPDATE ON ` + locks + ` FOR EACH ROW
			WHEN (OLD.owner <> '' AND NEW.owner = '') EXECUTE FUNCTION ` + fn + `();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + waiters + `'::regclass AND tgname = '` + strings.ToLower(waiters) + `_left') THEN
		CREATE TRIGGER ` + waiters + `_left AFTER DELETE ON ` + waiters + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `();
	END IF;
END
$d$`,
	}, watchSchema(locks)...)
}

// watchSchema creates the watchers table and the triggers that notify
// the watchers of a name (see watch.go): a NOTIFY on the lease table's
// channel with the payload watchPrefix + the name, sent only while a
// watchers row names it, whoever changes it. A mutex grant (an INSERT or
// an UPDATE that changes the owner, the count or the token) and its
// release fire them on the lease table, every change of a holder row but
// its renewal on the holders table (see postgresWeighted). A renewal
// fires nothing, and an expiry commits nothing: the Client reads the
// holders again when the first one's TTL runs out. The triggers take the
// listeners' lock shared, as the NOTIFY trigger does, so that a watch
// that registers (exclusive) either sees a change committed or is
// notified of it.
func watchSchema(locks string) []string {
	ch := channel(locks)
	fn := locks + "_watched"
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + watchersTable(locks) + ` (
	name TEXT COLLATE "C" NOT NULL,
	pid  INTEGER NOT NULL,
	PRIMARY KEY (name, pid)
)`,
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	n TEXT COLLATE "C";
BEGIN
	IF TG_OP = 'DELETE' THEN
		n := OLD.name;
	ELSE
		n := NEW.name;
	END IF;
	PERFORM pg_advisory_xact_lock_shared(` + listenKey(ch) + `);
	IF current_setting('transaction_isolation') <> 'read committed'
		OR EXISTS (SELECT 1 FROM ` + watchersTable(locks) + ` w WHERE w.name = n) THEN
		PERFORM pg_notify('` + ch + `', '` + watchPrefix + `' || n);
	END IF;
	RETURN NULL;
END
$f$`,
		`DO $d$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + locks + `'::regclass AND tgname = 'dlock_watch_ins') THEN
		CREATE TRIGGER dlock_watch_ins AFTER INSERT ON ` + locks + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + locks + `'::regclass AND tgname = 'dlock_watch_upd') THEN
		CREATE TRIGGER dlock_watch_upd AFTER UPDATE ON ` + locks + ` FOR EACH ROW
			WHEN (OLD.owner <> NEW.owner OR OLD.holds <> NEW.holds OR OLD.token <> NEW.token) EXECUTE FUNCTION ` + fn + `();
	END IF;
END
$d$`,
	}
}

func classifyPostgres(err error) sqllock.ErrorClass {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03", pe.Code == "23505", pe.Code == "57P01":
			// serialization failure, deadlock, lock not available, a
			// unique violation of two first inserts racing in a
			// transaction (the statement changed nothing), and a
			// connection terminated by pg_terminate_backend or a fast
			// shutdown (a pooled connection that died while idle: the
			// next attempt takes another)
			return sqllock.Retry
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources
			strings.HasPrefix(pe.Code, "57"), // operator intervention: shutdown, terminated, cannot connect now
			strings.HasPrefix(pe.Code, "28"), // invalid authorization
			pe.Code == "3D000",               // database does not exist
			pe.Code == "25006":               // read-only transaction (a standby)
			return sqllock.Unavailable
		}
		return sqllock.Other
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case pgconn.SafeToRetry(err) && !errors.As(err, &ce):
		return sqllock.Retry // nothing was sent
	case errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(err.Error(), "conn closed"),
		strings.Contains(err.Error(), "closed pool"):
		return sqllock.Unavailable
	}
	return sqllock.ClassifyCommon(err)
}
