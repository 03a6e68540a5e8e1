// Package postgres is a dlock backend on PostgreSQL (12 or later) through
// pgx (github.com/jackc/pgx/v5): a lease table, shared with the other SQL
// backends through one engine, with LISTEN/NOTIFY wake-ups.
//
//	b, err := postgres.Open("postgres://app@db:5432/app?sslmode=disable")
//	c := dlock.New(b)
//	// or: dlock.Open(ctx, "postgres://app@db:5432/app?table=locks")
//
// Constructors take a DSN ([Open]), a *sql.DB of pgx's stdlib driver
// ([New]) or a *pgxpool.Pool ([NewPool]). The URL schemes "postgres" and
// "postgresql" are registered with [dlock.Register]; see [ParseURL].
//
// # What the guarantee rests on
//
// One row per lock name in the lease table (default "dlock_locks"):
// owner, reentry count, fencing token and expires_at, in milliseconds by
// the database's clock. An acquisition is one statement, INSERT … ON
// CONFLICT (name) DO UPDATE … WHERE … RETURNING, which inserts a new row
// (token 1), takes over a free or expired row (token + 1) or re-enters
// the owner's row; PostgreSQL's row lock on the conflicting row
// serializes competing statements, and every statement judges expiry by
// the database's now(), never by a client's clock. A release is one
// UPDATE checked by owner, token and expiry, which clears the owner and
// keeps the row, so a token never goes back, even across restarts (the
// rows are ordinary durable data). Renewal is the same kind of UPDATE.
// So exclusion holds as long as the database is one consistent server
// (a primary; a failover to an asynchronous standby that lost commits can
// hand out a token again) and the clients' leases end before the
// database's (the Client's deadline is TTL × (1 − drift) after the send
// time of the last renewal).
//
// Fair locks queue in the waiters table ("dlock_locks_waiters") by an
// identity sequence, with heartbeats, so that waiters of dead processes
// drop out after the waiter timeout.
//
// # Waking
//
// A trigger on the tables NOTIFYs the channel named after the lease table
// whenever a lock is freed or a fair waiter leaves. While a Backend has
// waiters, one connection LISTENs on it (a separate connection for
// [Open], one taken from the pool for [New] and [NewPool]); waiters also
// wake when the holder's remaining lease, as the database computed it,
// has passed, because an expiry commits nothing. Nobody polls at a fixed
// interval.
//
// # Schema
//
// The tables, index and trigger are created on first use, or ahead of
// time by [Migrate] (`dlock migrate`), in one transaction under an
// advisory lock, so processes that start at once neither fail nor
// create anything twice.
package postgres
