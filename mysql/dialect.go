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
	Name:         "mysql",
	Now:          mysqlNow,
	Max:          "GREATEST",
	Begin:        "START TRANSACTION",
	InsertIgnore: "INSERT IGNORE INTO",
	Schema:       mysqlSchema,
	Attempt:      mysqlAttempt,
	Classify:     classifyMySQL,
}

// mysqlNow is MySQL's sqllock.Dialect.Now.
const mysqlNow = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)"

// mysqlUpserts caches the acquisition statement per lease table.
var mysqlUpserts sync.Map // table → string

// holdsBits is the width of the reentry count in the packed result.
const holdsBits = 20

func mysqlUpsert(table string) string {
	if q, ok := mysqlUpserts.Load(table); ok {
		return q.(string)
	}
	now := mysqlNow
	// The assignments run left to right, each seeing the columns assigned
	// before it: the first evaluates the condition on the old row and
	// leaves it in LAST_INSERT_ID() (1 or 0); holds and token are assigned
	// before owner and expires_at, which the re-entry test reads; the
	// last one packs the new token and holds. The inserted row's VALUES
	// pack token 1, holds 1 (and in the duplicate case the first
	// assignment overwrites that). Arguments: name, owner, ttl; owner,
	// name, seq (the condition); owner (holds); owner (token); owner,
	// ttl, ttl (expires_at); owner.
	q := `INSERT INTO ` + table + ` (name, owner, holds, token, expires_at)
VALUES (?, ?, LAST_INSERT_ID(` + strconv.Itoa(1<<holdsBits|1) + `) - ` + strconv.Itoa(1<<holdsBits) + `, 1, ` + now + ` + ?)
ON DUPLICATE KEY UPDATE
	holds = IF(LAST_INSERT_ID(IF((owner = ? AND expires_at > ` + now + `)
		OR ((owner = '' OR expires_at <= ` + now + `)
			AND NOT EXISTS (SELECT 1 FROM ` + sqllock.WaitersTable(table) + ` w WHERE w.name = ? AND w.seq < ? AND w.expires_at > ` + now + `)), 1, 0)) = 1,
		CASE WHEN owner = ? AND expires_at > ` + now + ` THEN holds + 1 ELSE 1 END, holds),
	token = IF(LAST_INSERT_ID() = 1, CASE WHEN owner = ? AND expires_at > ` + now + ` THEN token ELSE token + 1 END, token),
	expires_at = IF(LAST_INSERT_ID() = 1,
		CASE WHEN owner = ? AND expires_at > ` + now + ` THEN GREATEST(expires_at, ` + now + ` + ?) ELSE ` + now + ` + ? END, expires_at),
	owner = IF(LAST_INSERT_ID() = 1 AND LAST_INSERT_ID(token << ` + strconv.Itoa(holdsBits) + ` | holds) > 0, ?, owner)`
	mysqlUpserts.Store(table, q)
	return q
}

// mysqlAttempt is MySQL's sqllock.Dialect.Attempt: one statement, see MySQL.
func mysqlAttempt(ctx context.Context, q sqllock.Querier, table string, req dlock.Request, ttl, seq int64) (dlock.Grant, bool, error) {
	o := req.Owner
	res, err := q.ExecContext(ctx, mysqlUpsert(table),
		req.Name, o, ttl,
		o, req.Name, seq,
		o,
		o,
		o, ttl, ttl,
		o)
	if err != nil {
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
