package mysql

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/go-sql-driver/mysql"
)

// myDialect is the dialect of MySQL 8 and MariaDB 10.5 or later through
// github.com/go-sql-driver/mysql. The DSN must set clientFoundRows=true:
// an UPDATE that matched a row but changed nothing (a renewal within the
// same millisecond) must count as done. The clock is UTC_TIMESTAMP(3),
// which MySQL fixes at the start of a statement and which does not depend
// on the session's time zone.
//
// MySQL has no RETURNING and no ON CONFLICT … WHERE, so an acquisition is
// one INSERT … ON DUPLICATE KEY UPDATE whose assignments each keep the old
// value unless the grant's condition held, and whose result comes back in
// the OK packet's last-insert id, set with LAST_INSERT_ID(expr): 0 when
// refused, else token << 20 | holds (tokens below 2^43, reentry counts
// below 2^20). Renewals and releases are one UPDATE each.
var myDialect = sqllock.Dialect{
	Name:  "mysql",
	Now:   mysqlNow,
	Max:   "GREATEST",
	Begin: "START TRANSACTION",
	// A statement whose server stopped answering is given up on.
	Interruptible:    true,
	ConcurrentWrites: true,
	InsertIgnore:     "INSERT IGNORE INTO",
	Schema:           mysqlSchema,
	Attempt:          mysqlAttempt,
	MaxToken:         myMaxToken,
	Classify:         classifyMySQL,
	Buckets:          myBuckets,
	Bucket:           myBucket,
	Reclaim:          mysqlReclaim,
	// A trigger cannot change its own table: the release deletes the row
	// it freed with a second statement.
	DeleteFreed: true,
	DeleteLimit: true,
	FenceTx:     true,
	Missing:     func(err error) bool { return myErrno(err) == myNoSuchTable },
	Denied: func(err error) bool {
		n := myErrno(err)
		return n == myTableDenied || n == myColumnDenied
	},
	Weighted: mysqlWeighted,
	// Existing rows get the empty value.
	AddValue: func(_, _, holders string) []string {
		return []string{`ALTER TABLE ` + holders + ` ADD COLUMN value BLOB NOT NULL`}
	},
}

// mysqlWeighted creates the holders table (see sqllock.Dialect.Weighted).
func mysqlWeighted(_, _, holders string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + holders + ` (
	name       VARBINARY(512)  NOT NULL,
	owner      VARBINARY(1024) NOT NULL,
	weight     INT             NOT NULL,
	holds      INT             NOT NULL,
	token      BIGINT          NOT NULL,
	expires_at BIGINT          NOT NULL,
	value      BLOB            NOT NULL,
	PRIMARY KEY (name, owner),
	KEY ` + holders + `_expires (expires_at)
) ENGINE=InnoDB`,
	}
}

// myErrno returns the number of a server's error, or 0.
func myErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// myBuckets is the number of fence rows: acquisitions of names in
// different buckets never wait for one another there.
const myBuckets = 64

// myBucket is the fence bucket of a name: its CRC-32 modulo myBuckets.
func myBucket(name string) string {
	return "(CRC32(" + name + ") % " + strconv.Itoa(myBuckets) + ")"
}

// mysqlReclaim creates the fence table and the trigger that raises a
// bucket's mark to the token of a deleted row of dlock's.
func mysqlReclaim(locks, _, fence string) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + fence + ` (
	bucket INT    NOT NULL PRIMARY KEY,
	mark   BIGINT NOT NULL
) ENGINE=InnoDB`,
		`CREATE TRIGGER IF NOT EXISTS ` + locks + `_fence AFTER DELETE ON ` + locks + ` FOR EACH ROW
	UPDATE ` + fence + ` SET mark = GREATEST(mark, OLD.token)
	WHERE bucket = ` + myBucket("OLD.name") + ` AND ` + sqllock.RowOK(sqllock.Dialect{MaxToken: myMaxToken}, "OLD"),
	}
}

// mysqlNow is MySQL's sqllock.Dialect.Now.
const mysqlNow = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)"

// mysqlUpserts caches the acquisition statement per lease table.
var mysqlUpserts sync.Map // table → string

// holdsBits is the width of the reentry count in the packed result.
const holdsBits = 20

// myMaxToken is the largest token: a grant's token and count are packed
// into the last-insert id, the count in holdsBits bits, the token in the
// others below the sign bit.
const myMaxToken = 1<<(63-holdsBits) - 1

func mysqlUpsert(table string) string {
	if q, ok := mysqlUpserts.Load(table); ok {
		return q.(string)
	}
	q := myUpsert(table, `
	AND NOT EXISTS (SELECT 1 FROM `+sqllock.WaitersTable(table)+` w WHERE w.name = ? AND w.seq < ? AND w.expires_at > `+mysqlNow+`)`)
	mysqlUpserts.Store(table, q)
	return q
}

// myUpsert is the acquisition statement, its new row selected from the
// name's fence bucket (token mark + 1) if the condition cond, with the
// arguments of its placeholders, holds as well.
func myUpsert(table, cond string) string {
	now := mysqlNow
	// The assignments run left to right, each seeing the columns assigned
	// before it: the first evaluates the condition on the old row and
	// leaves it in LAST_INSERT_ID() (1 or 0); holds and token are assigned
	// before owner and expires_at, which the re-entry test reads; the
	// last one packs the new token and holds. The inserted row's SELECT
	// packs token mark + 1, holds 1 (and in the duplicate case the first
	// assignment overwrites that). Arguments: name, owner, ttl, name,
	// then cond's; owner,
	// name, seq (the condition); owner (holds); owner (token); owner,
	// ttl, ttl (expires_at); owner.
	q := `INSERT INTO ` + table + ` (name, owner, holds, token, expires_at)
SELECT ?, ?, LAST_INSERT_ID((f.mark + 1) << ` + strconv.Itoa(holdsBits) + ` | 1) - ((f.mark + 1) << ` + strconv.Itoa(holdsBits) + `), f.mark + 1, ` + now + ` + ?
FROM ` + sqllock.FenceTable(table) + ` f WHERE f.bucket = ` + myBucket("?") + cond + `
ON DUPLICATE KEY UPDATE
	holds = IF(LAST_INSERT_ID(IF(` + sqllock.RowOK(sqllock.Dialect{MaxToken: myMaxToken}, "") + ` AND ((owner = ? AND expires_at > ` + now + `)
		OR ((owner = '' OR expires_at <= ` + now + `)
			AND NOT EXISTS (SELECT 1 FROM ` + sqllock.WaitersTable(table) + ` w WHERE w.name = ? AND w.seq < ? AND w.expires_at > ` + now + `))), 1, 0)) = 1,
		CASE WHEN owner = ? AND expires_at > ` + now + ` THEN holds + 1 ELSE 1 END, holds),
	token = IF(LAST_INSERT_ID() = 1, CASE WHEN owner = ? AND expires_at > ` + now + ` THEN token ELSE token + 1 END, token),
	expires_at = IF(LAST_INSERT_ID() = 1,
		CASE WHEN owner = ? AND expires_at > ` + now + ` THEN GREATEST(expires_at, ` + now + ` + ?) ELSE ` + now + ` + ? END, expires_at),
	owner = IF(LAST_INSERT_ID() = 1 AND LAST_INSERT_ID(token << ` + strconv.Itoa(holdsBits) + ` | holds) > 0, ?, owner)`
	return q
}

// mysqlAttempt is MySQL's sqllock.Dialect.Attempt: one statement, see MySQL.
func mysqlAttempt(ctx context.Context, q sqllock.Querier, table string, req dlock.Request, ttl, seq int64) (dlock.Grant, bool, error) {
	o := req.Owner
	res, err := q.ExecContext(ctx, mysqlUpsert(table),
		req.Name, o, ttl, req.Name, req.Name, seq,
		o, req.Name, seq,
		o,
		o,
		o, ttl, ttl,
		o)
	if err != nil {
		return dlock.Grant{}, false, err
	}
	// No row selected (a live fair waiter is queued for a name without
	// a row): nothing was done, and LAST_INSERT_ID() was not set.
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return dlock.Grant{}, false, err
	}
	id, err := res.LastInsertId()
	if err != nil || id == 0 {
		return dlock.Grant{}, false, err
	}
	return dlock.Grant{Token: uint64(id) >> holdsBits, Count: int(id & (1<<holdsBits - 1))}, true, nil
}

func mysqlSchema(locks, waiters string) []string {
	// Names and owners are byte strings: they compare and order bytewise,
	// whatever the server's default collation.
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + locks + ` (
	name       VARBINARY(512)  NOT NULL PRIMARY KEY,
	owner      VARBINARY(1024) NOT NULL DEFAULT '',
	holds      INT             NOT NULL DEFAULT 0,
	token      BIGINT          NOT NULL DEFAULT 0,
	expires_at BIGINT          NOT NULL DEFAULT 0
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + waiters + ` (
	seq        BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
	name       VARBINARY(512)  NOT NULL,
	owner      VARBINARY(1024) NOT NULL,
	expires_at BIGINT          NOT NULL,
	KEY ` + waiters + `_name (name, seq)
) ENGINE=InnoDB`,
	}
}

// MySQL server error numbers.
const (
	myLockWaitTimeout   = 1205
	myDeadlock          = 1213
	myTooManyConns      = 1040
	myAccessDenied      = 1045
	myDBAccessDenied    = 1044
	myBadDB             = 1049
	myServerShutdown    = 1053
	myConnKilled        = 1927 // MariaDB ER_CONNECTION_KILLED
	myQueryInterrupted  = 1317
	myReadOnly          = 1290
	myServerGone        = 2006
	myLostConnection    = 2013
	myUnknownComErr     = 1047
	myNotSupportedAuth  = 1251
	myHostNotPrivileged = 1130
	myNoSuchTable       = 1146
	myTableDenied       = 1142 // ER_TABLEACCESS_DENIED_ERROR
	myColumnDenied      = 1143 // ER_COLUMNACCESS_DENIED_ERROR
)

func classifyMySQL(err error) sqllock.ErrorClass {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case myLockWaitTimeout, myDeadlock:
			return sqllock.Retry
		case myTooManyConns, myAccessDenied, myDBAccessDenied, myBadDB, myServerShutdown, myConnKilled,
			myQueryInterrupted, myReadOnly, myServerGone, myLostConnection, myUnknownComErr,
			myNotSupportedAuth, myHostNotPrivileged:
			return sqllock.Unavailable
		}
		return sqllock.Other
	}
	var ne net.Error
	switch {
	case errors.Is(err, mysql.ErrInvalidConn), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return sqllock.Unavailable
	}
	return sqllock.ClassifyCommon(err)
}
