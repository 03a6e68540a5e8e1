package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// mySession is session mode on MySQL 8 and MariaDB: a user-level lock
// (GET_LOCK) named "dlock:" + the first 58 hex digits of SHA-256(table,
// name), as lock names are limited to 64 characters.
//
// A first attempt is one statement when the lock is free (the row's
// conditional grant, made only if GET_LOCK(key, 0) succeeds), a renewal
// and a release one each (the release calls RELEASE_LOCK inside its
// UPDATE). A waiting Lock is one GET_LOCK with a
// timeout of a year, interrupted with KILL QUERY from another connection.
// MariaDB (and MySQL 8) grant user locks to their waiters in order.
var mySession = sqllock.SessionDialect{
	Key:    func(table, name string) any { return SessionLockName(table, name) },
	Attach: func(*sql.Conn) (sqllock.ConnInfo, error) { return sqllock.ConnInfo{}, nil },
	ConnID: myConnID,
	First:  myFirst,
	Lock: func(ctx context.Context, c *sql.Conn, key any, ttl int64, _ bool) error {
		return myLock(ctx, c, key, ttl)
	},
	Queued: myQueued,
	Renew: func(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold, ttl int64) (bool, error) {
		res, err := c.ExecContext(ctx, myStmts(table).renew, ttl, h.Name, h.Owner, int64(h.Token), key)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		if err == nil && n > 0 {
			err = myIdle(ctx, c, ttl) // a round trip only when Extend changed the TTL
		}
		return n > 0, err
	},
	Release: func(ctx context.Context, c *sql.Conn, table string, key any, h dlock.Hold) (bool, bool, error) {
		res, err := c.ExecContext(ctx, myStmts(table).release, key, h.Name, h.Owner, int64(h.Token))
		if err != nil {
			return false, false, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, false, err
		}
		if n > 0 {
			// RELEASE_LOCK ran in the UPDATE. The row it freed is left
			// to the sweep: a DELETE here would deadlock with the
			// acquisition of the waiter that RELEASE_LOCK woke.
			return true, true, myIdle(ctx, c, 0)
		}
		_, err = c.ExecContext(ctx, `DO RELEASE_LOCK(?)`, key)
		if err == nil {
			err = myIdle(ctx, c, 0)
		}
		return false, err == nil, err
	},
	Unlock: myUnlock,
	Interrupt: func(ctx context.Context, db *sql.DB, info sqllock.ConnInfo) error {
		if info.ID == 0 {
			return errors.New("connection id unknown")
		}
		_, err := db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(info.ID, 10))
		return err
	},
	Weighted: myWeighted,
}

// myWeighted is session mode's semaphore of 1 and election on MySQL: the
// holder's connection holds the name's user lock (the mutex's), and the
// lease mode's weighted rows record the kind, the token and the
// election's value. GET_LOCK has no shared mode, so read-write locks are
// refused (Exclusive); the waiters wait in GET_LOCK's queue, in order, as
// the mutex's do. The wait_timeout is set as for the mutex.
var myWeighted = &sqllock.SessionWeighted{
	Exclusive: true,
	Try: func(ctx context.Context, c *sql.Conn, key any, _ bool, ttl int64) (bool, error) {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, key).Scan(&got); err != nil || got.Int64 != 1 {
			return false, err
		}
		return true, myIdle(ctx, c, ttl)
	},
	Lock: func(ctx context.Context, c *sql.Conn, key any, _ bool, ttl int64) error {
		return myLock(ctx, c, key, ttl)
	},
	Held: func(ctx context.Context, c *sql.Conn, key any, _ bool, ttl int64) (bool, error) {
		var held sql.NullBool
		if err := c.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, key).Scan(&held); err != nil || !held.Bool {
			return false, err
		}
		return true, myIdle(ctx, c, ttl)
	},
	Unlock: func(ctx context.Context, c *sql.Conn, key any, _ bool) (bool, error) {
		return myUnlock(ctx, c, key)
	},
}

// myLock waits in GET_LOCK's queue until c holds the user lock key, and
// sets c's wait_timeout for a hold of ttl milliseconds.
func myLock(ctx context.Context, c *sql.Conn, key any, ttl int64) error {
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, 31536000)`, key).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return errors.New("GET_LOCK returned without the lock")
	}
	return myIdle(ctx, c, ttl)
}

// myUnlock releases c's user lock key and sets its wait_timeout back; it
// reports whether c held the lock.
func myUnlock(ctx context.Context, c *sql.Conn, key any) (bool, error) {
	var got sql.NullInt64
	err := c.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, key).Scan(&got)
	if err == nil {
		err = myIdle(ctx, c, 0)
	}
	return got.Int64 == 1, err
}

type mySessionStatements struct {
	reenter, renew, release string
}

var mySessionStmts sync.Map // table → *mySessionStatements

func myStmts(table string) *mySessionStatements {
	if s, ok := mySessionStmts.Load(table); ok {
		return s.(*mySessionStatements)
	}
	bind := sqllock.Bind(myDialect, table)
	s := &mySessionStatements{
		// The owner's row re-entered, the result packed in the last-insert
		// id as in the dialect's Attempt. Args: ttl, name, owner.
		reenter: bind(`UPDATE {L} AS l SET
	holds = l.holds + 1,
	expires_at = GREATEST(l.expires_at, {NOW} + ?),
	token = l.token + 0 * LAST_INSERT_ID(l.token << ` + strconv.Itoa(holdsBits) + ` | l.holds)
WHERE l.name = ? AND l.owner = ? AND l.holds > 0 AND l.expires_at > {NOW} AND {OK}`),
		// Args: ttl, name, owner, token, key.
		renew: bind(`UPDATE {L} AS l SET expires_at = {NOW} + ?
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}
	AND IS_USED_LOCK(?) = CONNECTION_ID()`),
		// RELEASE_LOCK runs in the assignment of the matched row, after
		// InnoDB locked it: a waiter woken by it finds the row locked by
		// this statement until it commits. The first WHEN is never true
		// but is always evaluated. Args: key, name, owner, token.
		release: bind(`UPDATE {L} AS l SET
	owner = CASE WHEN COALESCE(RELEASE_LOCK(?), 0) < 0 THEN l.owner WHEN l.holds <= 1 THEN '' ELSE l.owner END,
	holds = l.holds - 1
WHERE l.name = ? AND l.owner = ? AND l.token = ? AND l.holds > 0 AND l.expires_at > {NOW}`),
	}
	mySessionStmts.Store(table, s)
	return s
}

// mySessionUpsert is the dialect's one-statement acquisition (see
// mysqlUpsert) made conditional on GET_LOCK(key, 0) instead of the fair
// queue: without the lock the statement touches nothing (0 rows affected)
// and with it the row is granted or refused as in lease-table mode.
// Arguments: name, owner, ttl, name, key, then mysqlUpsert's after its
// SELECT.
func mySessionUpsert(table string) string {
	if q, ok := mySessionUpserts.Load(table); ok {
		return q.(string)
	}
	// Session mode queues in the server, not in the waiters table.
	q := myUpsert(table, " AND GET_LOCK(?, 0) = 1")
	mySessionUpserts.Store(table, q)
	return q
}

var mySessionUpserts sync.Map // table → string

// myFirst is the first attempt: one statement when the lock is free (the
// conditional upsert), two when it is taken (then the owner's re-entry).
func myFirst(ctx context.Context, c *sql.Conn, _ *sqllock.ConnInfo, table string, key any, req dlock.Request, ttl int64) (bool, dlock.Grant, bool, error) {
	o := req.Owner
	res, err := c.ExecContext(ctx, mySessionUpsert(table),
		req.Name, o, ttl, req.Name, key,
		o, req.Name, sqllock.NoSeq,
		o,
		o,
		o, ttl, ttl,
		o)
	if err != nil {
		return false, dlock.Grant{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, dlock.Grant{}, false, err
	}
	if n > 0 { // GET_LOCK succeeded
		if err := myIdle(ctx, c, ttl); err != nil {
			return true, dlock.Grant{}, false, err
		}
		id, err := res.LastInsertId()
		if err != nil || id == 0 {
			return true, dlock.Grant{}, false, err
		}
		return true, unpack(id), true, nil
	}
	res, err = c.ExecContext(ctx, myStmts(table).reenter, ttl, req.Name, req.Owner)
	if err != nil {
		return false, dlock.Grant{}, false, err
	}
	id, err := res.LastInsertId()
	if err != nil || id == 0 {
		return false, dlock.Grant{}, false, err
	}
	return false, unpack(id), true, nil
}

// unpack reads a grant packed in the last-insert id (see myDialect).
func unpack(id int64) dlock.Grant {
	return dlock.Grant{Token: uint64(id) >> holdsBits, Count: int(id & (1<<holdsBits - 1))}
}

// myQueued reports whether connection info.ID waits in GET_LOCK (its
// state is "User lock"), from SHOW PROCESSLIST, which lists the threads
// of the same user without the PROCESS privilege. Not from
// information_schema.PROCESSLIST: MariaDB 10.11.19 crashed (signal 11 in
// ha_maria::drop_table, freeing the query's temporary table) under
// concurrent queries of it in the tests.
func myQueued(ctx context.Context, c *sql.Conn, info sqllock.ConnInfo, _ any) (bool, error) {
	rows, err := c.QueryContext(ctx, `SHOW PROCESSLIST`)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return false, err
	}
	idCol, stateCol := -1, -1
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "id":
			idCol = i
		case "state":
			stateCol = i
		}
	}
	if idCol < 0 || stateCol < 0 {
		return false, fmt.Errorf("SHOW PROCESSLIST has no Id or State column: %v", cols)
	}
	id := strconv.FormatInt(info.ID, 10)
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	queued := false
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return false, err
		}
		if string(vals[idCol]) == id && string(vals[stateCol]) == "User lock" {
			queued = true
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	return queued, rows.Close()
}

// myIdle sets the session wait_timeout of c, the connection that holds
// (ttl > 0) or has just released (ttl 0: the server's global value) a
// user lock, unless it is set so already. While c holds a lock, the server
// closes it, freeing the lock, once it has been idle for the TTL (rounded
// up to whole seconds; the server's global value comes back at the
// release), as PostgreSQL's idle_session_timeout does in
// session mode: a holder that froze, died without closing its socket or
// was cut off by a partition stops renewing, and its lock is taken over
// soon after its row's expiry instead of after the global wait_timeout. A
// live holder renews every TTL/3, so it is never idle that long. The
// statement's cost (one round trip) is paid once per grant and release.
func myIdle(ctx context.Context, c *sql.Conn, ttl int64) error {
	secs := (ttl + 999) / 1000
	k := weak.Make(c)
	if v, ok := myIdles.Load(k); ok && v.(int64) == secs || !ok && secs == 0 {
		return nil
	}
	var err error
	if secs == 0 {
		_, err = c.ExecContext(ctx, `SET SESSION wait_timeout = @@GLOBAL.wait_timeout`)
		myIdles.Delete(k)
	} else {
		_, err = c.ExecContext(ctx, `SET SESSION wait_timeout = ?`, secs)
		if _, had := myIdles.Swap(k, secs); !had {
			runtime.AddCleanup(c, func(k weak.Pointer[sql.Conn]) { myIdles.Delete(k) }, k)
		}
	}
	return err
}

// myIdles holds the session wait_timeout (seconds) that myIdle set on a
// connection, until it set it back; the entry of a connection discarded
// while it held a lock goes when the connection is collected.
var myIdles sync.Map // weak.Pointer[sql.Conn] → int64

// myConnID reads the connection's id, which KILL QUERY needs.
func myConnID(ctx context.Context, c *sql.Conn) (int64, error) {
	var id int64
	err := c.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id)
	return id, err
}
