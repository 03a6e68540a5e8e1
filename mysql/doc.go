// Package mysql is a dlock backend on MySQL 8 or MariaDB 10.5 or later
// through github.com/go-sql-driver/mysql: a lease table, shared with the
// other SQL backends through one engine.
//
//	b, err := mysql.Open("app:secret@tcp(db:3306)/app")
//	c := dlock.New(b)
//	// or: dlock.Open(ctx, "mysql://app:secret@db:3306/app?table=locks")
//
// Constructors take a DSN ([Open]) or a *sql.DB ([New]). The URL scheme
// "mysql" is registered with [dlock.Register]; [ParseURL] says how a URL
// becomes a driver DSN.
//
// # What the guarantee rests on
//
// One InnoDB row per lock name in the lease table (default
// "dlock_locks"): owner, reentry count, fencing token and expires_at, in
// milliseconds by the database's clock (UTC_TIMESTAMP(3), fixed for one
// statement, independent of time zones). An acquisition is one
// statement: INSERT … ON DUPLICATE KEY UPDATE, whose assignments keep the
// old row unless the grant's condition holds — a free or expired row is
// taken over (token + 1), the owner's row re-entered — and whose result
// (token and reentry count, or a refusal) comes back in the OK packet's
// last-insert id. InnoDB's row lock serializes competing statements, and
// expiry is judged by the database, never by a client's clock. A release
// is one UPDATE checked by owner, token and expiry that clears the owner
// and keeps the row, so a token never goes back, even across restarts (the
// rows are durable InnoDB data). Renewal
// is the same kind of UPDATE. So exclusion holds as long as the database
// is one consistent server (a failover to a replica that lost commits can
// hand out a token again) and the clients' leases end before the
// database's (the Client's deadline is TTL × (1 − drift) after the send
// time of the last renewal).
//
// Fair locks queue in the waiters table ("dlock_locks_waiters") by an
// AUTO_INCREMENT sequence, with heartbeats, so that waiters of dead
// processes drop out after the waiter timeout.
//
// # Waking
//
// A release wakes the waiters of the same Backend at once. MySQL has no
// notifications, so a waiter of another Backend or process looks again
// when the holder's remaining lease, as the database computed it, has
// passed, and meanwhile at an interval that backs off from 5 ms to 100 ms
// — never a fixed long sleep.
//
// # Schema
//
// The tables are created on first use, or ahead of time by [Migrate]
// (`dlock migrate`), with CREATE TABLE IF NOT EXISTS, which is safe when
// several processes start at once. Names and owners are VARBINARY, so
// they compare and order bytewise whatever the server's collation.
package mysql
