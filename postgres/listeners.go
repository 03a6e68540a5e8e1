package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The NOTIFY trigger sends nothing while no connection listens on the
// lease table's channel: a NOTIFY costs every release a server-wide lock
// at commit, which serializes the releases of all names (tens of times
// fewer releases per second with 32 clients). A listening connection says
// that it listens with a row in the listeners table, written after its
// LISTEN under the listen key's advisory lock, exclusive; the trigger
// reads the table under the same lock, shared, held until its
// transaction ends. So a release either commits before the row is
// written (and before the waiter that subscribed then looks at the lock:
// it sees the lock free), or sees the row and notifies.

// listenersTable returns the name of the listeners table of lease table
// locks: one row (pid, backend start) per connection that LISTENs.
func listenersTable(locks string) string { return locks + "_listeners" }

// listenKey is the SQL of the advisory lock key (two int4: apart from
// session mode's int8 keys) that orders registrations and notifications
// on channel ch.
func listenKey(ch string) string {
	return `hashtext('dlock listeners'), hashtext('` + ch + `')`
}

// register records conn, which LISTENs on the channel of lease table
// locks, in the listeners table, first deleting the rows of connections
// that are gone (a process that died): those would only cost NOTIFYs.
// pg_stat_activity hides backend_start of another role's session from a
// role without pg_read_all_stats: such a row is kept (deleting a live
// listener's row would lose its wake-ups; keeping a dead one costs
// NOTIFYs only). A
// table that does not exist (created by an older dlock, opened without
// migrating) is fine: its trigger notifies always.
func register(ctx context.Context, conn *pgx.Conn, locks string) error {
	t := listenersTable(locks)
	_, err := conn.Exec(ctx, `BEGIN;
SELECT pg_advisory_xact_lock(`+listenKey(channel(locks))+`);
DELETE FROM `+t+` l WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid
	AND (a.backend_start = l.started OR a.backend_start IS NULL));
INSERT INTO `+t+` (pid, started) SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()
	ON CONFLICT (pid) DO UPDATE SET started = EXCLUDED.started;
COMMIT`)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		_, err = conn.Exec(ctx, "ROLLBACK")
	}
	return err
}

// unregister deletes the row of conn, which stops listening: best effort,
// as a row left behind only costs NOTIFYs until the next register.
func unregister(conn *pgx.Conn, locks string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Exec(ctx, `DELETE FROM `+listenersTable(locks)+` WHERE pid = pg_backend_pid()`)
}
