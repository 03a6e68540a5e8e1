package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// sessionDialect is session mode on PostgreSQL through pgx's database/sql
// driver: a session-level advisory lock (pg_advisory_lock) on a 64-bit key,
// the first 8 bytes of SHA-256(table, name).
//
// The first attempt, the renewal and the release are one statement each.
// While a connection holds a lock its idle_session_timeout (PostgreSQL 14
// and later) is the TTL + 1s, so that the server ends the connection of a
// client that vanished without closing it soon after its lease has run
// out; the release sets it back to 0.
//
// closed, if set, peeks at a connection's socket (see sqllock.ConnInfo.Closed).
func sessionDialect(closed func(pc *pgconn.PgConn) bool) sqllock.SessionDialect {
	return sqllock.SessionDialect{
		Key: func(table, name string) any { return SessionKey(table, name) },
		// Over a pgxpool.Pool (NewPool), closing the driver connection
		// gives the pgx connection back to the pool with its advisory
		// locks: close the pgx connection itself, which the pool then
		// destroys.
		Close: func(dc any) {
			if sc, ok := dc.(*stdlib.Conn); ok {
				closeConn(sc.Conn())
			}
		},
		Attach: func(c *sql.Conn) (sqllock.ConnInfo, error) {
			var pc *pgconn.PgConn
			err := c.Raw(func(dc any) error {
				sc, ok := dc.(*stdlib.Conn)
				if !ok {
					return fmt.Errorf("session mode needs pgx's database/sql driver, not %T", dc)
				}
				pc = sc.Conn().PgConn()
				return nil
			})
			if err != nil {
				return sqllock.ConnInfo{}, err
			}
			info := sqllock.ConnInfo{ID: int64(pc.PID()), Cancel: pc.CancelRequest}
			if closed != nil {
				info.Closed = func() bool { return closed(pc) }
			}
			return info, nil
		},
		First:  pgFirst,
		Lock:   pgLock,
		Mark:   pgMark,
		Queued: pgQueued,
		Renew:  pgRenew,
		Release: func(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold) (bool, bool, error) {
			var (
				holds    sql.NullInt64
				unlocked bool
			)
			err := c.QueryRowContext(ctx, pgStmts(table).release, h.Name, h.Owner, int64(h.Token), key).Scan(&holds, &unlocked)
			return holds.Valid, unlocked, err
		},
		Unlock: func(ctx context.Context, c *sql.Conn, key any) (bool, error) {
			var ok bool
			err := c.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1), set_config('idle_session_timeout', '0', false)`, key).Scan(&ok, new(string))
			return ok, err
		},
		Weighted: pgWeighted,
	}
}

// pgWeighted is session mode's read-write lock on PostgreSQL: a reader
// holds the name's advisory key shared (pg_advisory_lock_shared), a writer
// exclusive (pg_advisory_lock), each on its own connection. PostgreSQL's
// lock manager queues a request behind any waiting request it conflicts
// with (LockAcquire checks the lock's wait mask before the holders), and
// the try functions are refused in that case too: so once a writer waits,
// later readers wait behind it — the head-of-line rule — while readers
// that arrive with no writer waiting share at once. A connection that
// holds the key exclusive and asks it shared is granted at once, ahead of
// the waiters (ProcSleep puts a requester that holds what they wait for
// in front of them): that is the downgrade. The idle timeout is set as
// for the mutex.
var pgWeighted = &sqllock.SessionWeighted{
	Try: func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) (bool, error) {
		var ok bool
		err := c.QueryRowContext(ctx, `WITH t AS MATERIALIZED (SELECT `+pgAdvisory("pg_try_advisory_lock", shared)+`($1) AS ok)
SELECT t.ok, `+strings.Replace(pgIdleIf("t.ok"), "?", "$2", 1)+` FROM t`, key, pgIdleArg(ttl)).Scan(&ok, new(sql.NullString))
		return ok, err
	},
	Lock: func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) error {
		_, err := c.ExecContext(ctx, `SELECT `+pgAdvisory("pg_advisory_lock", shared)+`($1), `+strings.Replace(pgIdle, "?", "$2", 1), key, pgIdleArg(ttl))
		return err
	},
	Held: func(ctx context.Context, c *sql.Conn, key any, shared bool, ttl int64) (bool, error) {
		classid, objid := pgKeyParts(key)
		mode := "ExclusiveLock"
		if shared {
			mode = "ShareLock"
		}
		var ok bool
		err := c.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks p WHERE p.locktype = 'advisory' AND p.pid = pg_backend_pid()
	AND p.classid = $1::bigint::oid AND p.objid = $2::bigint::oid AND p.objsubid = 1 AND p.granted AND p.mode = $3), `+
			strings.Replace(pgIdle, "?", "$4", 1), classid, objid, mode, pgIdleArg(ttl)).Scan(&ok, new(sql.NullString))
		return ok, err
	},
	Unlock: func(ctx context.Context, c *sql.Conn, key any, shared bool) (bool, error) {
		var ok bool
		err := c.QueryRowContext(ctx, `SELECT `+pgAdvisory("pg_advisory_unlock", shared)+`($1), set_config('idle_session_timeout', '0', false)`, key).Scan(&ok, new(string))
		return ok, err
	},
	Share: func(ctx context.Context, c *sql.Conn, key any) error {
		_, err := c.ExecContext(ctx, `SELECT pg_advisory_lock_shared($1)`, key)
		return err
	},
	Drop: func(ctx context.Context, c *sql.Conn, key any) (bool, error) {
		var ok bool
		err := c.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&ok)
		return ok, err
	},
}

// pgAdvisory returns the shared variant of advisory lock function fn if
// shared.
func pgAdvisory(fn string, shared bool) string {
	if shared {
		return fn + "_shared"
	}
	return fn
}

type pgSessionStatements struct {
	first, renew, release string
}

var pgSessionStmts sync.Map // table → *pgSessionStatements

// pgIdle sets idle_session_timeout to the argument (milliseconds, text)
// on PostgreSQL 14 and later, where it exists.
const pgIdle = `CASE WHEN current_setting('server_version_num')::int >= 140000
	THEN set_config('idle_session_timeout', ?, false) END`

// pgIdleIf is pgIdle only if the boolean expression cond is true.
func pgIdleIf(cond string) string {
	return `CASE WHEN ` + cond + ` AND current_setting('server_version_num')::int >= 140000
	THEN set_config('idle_session_timeout', ?, false) END`
}

func pgStmts(table string) *pgSessionStatements {
	if s, ok := pgSessionStmts.Load(table); ok {
		return s.(*pgSessionStatements)
	}
	bind := sqllock.Bind(pgDialect, table)
	s := &pgSessionStatements{
		// a: the advisory lock, tried once (MATERIALIZED: evaluated once).
		// g: with it, the conditional grant on the row (see the engine's
		// upsert). r: without it, a re-entry of the owner's row.
		// Args: key, idle; name, owner, ttl, name, name, seq, set's,
		// cond's; ttl, name, owner.
		first: bind(`WITH t AS MATERIALIZED (SELECT pg_try_advisory_lock(?) AS ok),
a AS MATERIALIZED (SELECT t.ok, ` + pgIdleIf("t.ok") + ` AS idle FROM t),
g AS (
	INSERT INTO {L} AS l (name, owner, holds, token, expires_at)
	SELECT ?, ?, 1, f.mark + 1, {NOW} + ? FROM a, {F} f
	WHERE a.ok AND f.bucket = ` + pgBucket("?") + `
		AND NOT EXISTS (SELECT 1 FROM {W} w WHERE w.name = ? AND w.seq < ? AND w.expires_at > {NOW})
	FOR SHARE OF f
	ON CONFLICT (name) DO UPDATE SET
	` + sqllock.SetSQL + `
	WHERE ` + sqllock.CondSQL + `
	RETURNING l.token, l.holds),
r AS (
	UPDATE {L} AS l SET holds = l.holds + 1, expires_at = {MAX}(l.expires_at, {NOW} + ?)
	FROM a WHERE NOT a.ok AND l.name = ? AND l.owner = ? AND l.holds > 0 AND l.expires_at > {NOW} AND {OK}
	RETURNING l.token, l.holds)
SELECT a.ok, COALESCE(g.token, r.token), COALESCE(g.holds, r.holds)
FROM a LEFT JOIN g ON true LEFT JOIN r ON true`),
		// Args: idle, ttl, name, owner, token, classid, objid.
		renew: bind(`WITH i AS MATERIALIZED (SELECT ` + pgIdle + ` AS idle)
UPDATE {L} AS l SET expires_at = {NOW} + ? FROM i
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}
	AND EXISTS (SELECT 1 FROM pg_locks p WHERE p.locktype = 'advisory' AND p.pid = pg_backend_pid()
		AND p.classid = ?::bigint::oid AND p.objid = ?::bigint::oid AND p.objsubid = 1 AND p.granted)`),
		// The row first, then the advisory lock: a waiter woken by the
		// unlock finds the row locked by this statement until it commits.
		// Args: name, owner, token, key.
		release: bind(`WITH u AS (
	UPDATE {L} AS l SET
		owner = CASE WHEN l.holds <= 1 THEN '' ELSE l.owner END,
		holds = l.holds - 1
	WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}` + sqllock.FenceFirstSQL(pgDialect) + `
	RETURNING l.holds)
SELECT u.holds, pg_advisory_unlock(?) AND set_config('idle_session_timeout', '0', false) IS NOT NULL
FROM (VALUES (1)) v LEFT JOIN u ON true`),
	}
	pgSessionStmts.Store(table, s)
	return s
}

func pgIdleArg(ttl int64) string { return strconv.FormatInt(ttl+1000, 10) }

func pgFirst(ctx context.Context, c *sql.Conn, _ *sqllock.ConnInfo, table string, key any, req dlock.Request, ttl int64) (bool, dlock.Grant, bool, error) {
	args := append([]any{key, pgIdleArg(ttl)}, sqllock.NewRowArgs(req.Name, req.Owner, ttl, sqllock.NoSeq)...)
	args = append(args, sqllock.SetArgs(req.Owner, ttl)...)
	args = append(args, sqllock.CondArgs(req.Owner, req.Name, sqllock.NoSeq)...)
	args = append(args, ttl, req.Name, req.Owner)
	var (
		locked       bool
		token, holds sql.NullInt64
	)
	if err := c.QueryRowContext(ctx, pgStmts(table).first, args...).Scan(&locked, &token, &holds); err != nil {
		return false, dlock.Grant{}, false, err
	}
	if !token.Valid {
		return locked, dlock.Grant{}, false, nil
	}
	return locked, dlock.Grant{Token: uint64(token.Int64), Count: int(holds.Int64)}, true, nil
}

// pgLock waits for the advisory lock and sets the idle timeout of a
// holder; if the wait is interrupted, the setting is rolled back with it.
// Once it holds the lock, it drops the mark (see pgMark).
func pgLock(ctx context.Context, c *sql.Conn, key any, ttl int64, marked bool) error {
	if !marked {
		_, err := c.ExecContext(ctx, `SELECT pg_advisory_lock($1), `+strings.Replace(pgIdle, "?", "$2", 1), key, pgIdleArg(ttl))
		return err
	}
	hi, lo := pgMarkKey(key)
	_, err := c.ExecContext(ctx, `SELECT pg_advisory_lock($1), pg_advisory_unlock_shared($3, $4), `+strings.Replace(pgIdle, "?", "$2", 1), key, pgIdleArg(ttl), hi, lo)
	return err
}

// pgKeyParts splits an advisory key into pg_locks' classid and objid.
func pgKeyParts(key any) (int64, int64) {
	k := uint64(key.(int64))
	return int64(k >> 32), int64(k & 0xffffffff)
}

// pgMarkKey is the mark of a fair waiter for advisory key (see pgMark):
// the two-int4 advisory key with the same bits, which pg_locks tells from
// the bigint key by objsubid 2.
func pgMarkKey(key any) (int32, int32) {
	k := uint64(key.(int64))
	return int32(uint32(k >> 32)), int32(uint32(k))
}

// pgMark is SessionDialect.Mark: the mark is a shared advisory lock on
// pgMarkKey(key), which pg_locks shows to every connection as soon as it
// is taken, and which the Lock statement drops once granted. A marked
// connection that has no entry for key in pg_locks (neither granted nor
// waiting) is still to queue. One snapshot of pg_locks decides. CASE,
// not AND, so that the mark is surely not taken when refused: a second
// one would outlive the Lock statement. (A try refused because someone
// else holds that key exclusively leaves the waiter unmarked but going
// on: it only loses its place to later fair waiters.)
func pgMark(ctx context.Context, c *sql.Conn, key any, force bool) (bool, error) {
	classid, objid := pgKeyParts(key)
	hi, lo := pgMarkKey(key)
	var marked bool
	err := c.QueryRowContext(ctx, `WITH l AS MATERIALIZED (SELECT p.pid, p.objsubid, p.granted FROM pg_locks p
	WHERE p.locktype = 'advisory' AND p.classid = $1::bigint::oid AND p.objid = $2::bigint::oid),
m AS MATERIALIZED (SELECT $3 OR NOT EXISTS (SELECT 1 FROM l WHERE l.objsubid = 2 AND l.granted
	AND l.pid <> pg_backend_pid() AND NOT EXISTS (SELECT 1 FROM l q WHERE q.pid = l.pid AND q.objsubid = 1)) AS go)
SELECT CASE WHEN m.go THEN pg_try_advisory_lock_shared($4, $5) IS NOT NULL ELSE false END FROM m`, classid, objid, force, hi, lo).Scan(&marked)
	return marked, err
}

func pgQueued(ctx context.Context, c *sql.Conn, info sqllock.ConnInfo, key any) (bool, error) {
	hi, lo := pgKeyParts(key)
	var ok bool
	err := c.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $1
	AND classid = $2::bigint::oid AND objid = $3::bigint::oid AND objsubid = 1)`, info.ID, hi, lo).Scan(&ok)
	return ok, err
}

func pgRenew(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold, ttl int64) (bool, error) {
	hi, lo := pgKeyParts(key)
	res, err := c.ExecContext(ctx, pgStmts(table).renew, pgIdleArg(ttl), ttl, h.Name, h.Owner, int64(h.Token), hi, lo)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
