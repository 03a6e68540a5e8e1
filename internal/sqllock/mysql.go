package sqllock

import (
	"errors"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"
)

// MySQL is the dialect of MySQL 8 and MariaDB 10.5 or later through
// github.com/go-sql-driver/mysql. The DSN must set clientFoundRows=true:
// an UPDATE that matched a row but changed nothing (a renewal within the
// same millisecond) must count as done. The clock is UTC_TIMESTAMP(3),
// which MySQL fixes at the start of a statement and which does not depend
// on the session's time zone. MySQL has no RETURNING on UPDATE, so an
// acquisition is a transaction (INSERT IGNORE, the conditional UPDATE, a
// SELECT of the result); renewals and releases are one UPDATE each.
var MySQL = Dialect{
	Name:         "mysql",
	Now:          "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)",
	Max:          "GREATEST",
	Begin:        "START TRANSACTION",
	InsertIgnore: "INSERT IGNORE INTO",
	Schema:       mysqlSchema,
	Classify:     classifyMySQL,
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

func classifyMySQL(err error) ErrorClass {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case myLockWaitTimeout, myDeadlock:
			return Retry
		case myTooManyConns, myAccessDenied, myDBAccessDenied, myBadDB, myServerShutdown, myConnKilled,
			myQueryInterrupted, myReadOnly, myServerGone, myLostConnection, myUnknownComErr,
			myNotSupportedAuth, myHostNotPrivileged:
			return Unavailable
		}
		return Other
	}
	var ne net.Error
	switch {
	case errors.Is(err, mysql.ErrInvalidConn), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Unavailable
	}
	return classifyCommon(err)
}
