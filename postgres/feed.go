package postgres

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5"
)

// listenFeed is a [sqllock.Feed] on LISTEN: one connection outside the
// engine's pool LISTENs on the lease table's channel while there are
// waiters. A notification (a lock freed, a fair waiter gone) names the
// first live fair waiter queued for the lock, which alone is woken, or
// nobody when none is queued, which wakes them all. A lost listening
// connection wakes them too (they then look for themselves) and is
// replaced after reconnectDelay.
type listenFeed struct {
	acquire func(context.Context) (*pgx.Conn, func(), error)
	table   string             // the lease table, whose channel it listens on
	feed    *sqllock.WatchFeed // whose Notice gets each notification's payload
}

// reconnectDelay is the pause between attempts to (re)establish the
// listening connection; waiters are woken at each failed attempt.
const reconnectDelay = 100 * time.Millisecond

// listenConnectTimeout bounds one attempt to open the listening connection.
const listenConnectTimeout = 10 * time.Second

// listenLinger is how long the listening connection stays after the last
// waiter leaves: a process that waits again soon (each contended
// acquisition) then needs no new connection and LISTEN before it can be
// woken, which cost tens of milliseconds per hand-off.
const listenLinger = 2 * time.Second

func newListenFeed(table string, acquire func(context.Context) (*pgx.Conn, func(), error)) *sqllock.WatchFeed {
	f := &listenFeed{acquire: acquire, table: table}
	f.feed = sqllock.NewWatchFeed(f.run)
	f.feed.Linger(listenLinger)
	return f.feed
}

// run listens until ctx is done. It is ready once it LISTENs (every
// notification committed after that reaches it) or has failed once (then
// waiters are woken at every failed reconnection, and look for
// themselves).
func (f *listenFeed) run(ctx context.Context, ready, changed func()) {
	first := true
	for ctx.Err() == nil {
		f.listen(ctx, func() {
			if !first {
				// Notifications sent while no connection listened
				// are lost: let the waiters look.
				changed()
			}
			first = false
			ready()
		})
		if ctx.Err() != nil {
			return
		}
		changed()
		ready()
		first = false
		if dur.Sleep(ctx, reconnectDelay) != nil {
			return
		}
	}
}

// listen opens a connection, LISTENs, registers it (see register), calls
// listening, and reports each
// notification's payload to the feed's Notice (which wakes the fair
// waiter it names, or every waiter) until the connection fails or ctx is
// done.
func (f *listenFeed) listen(ctx context.Context, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	conn, release, err := f.acquire(cctx)
	if err != nil {
		cancel()
		return err
	}
	defer release()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{channel(f.table)}.Sanitize())
	if err == nil {
		err = register(cctx, conn, f.table)
	}
	cancel()
	if err != nil {
		return err
	}
	defer unregister(conn, f.table)
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		f.feed.Notice(n.Payload)
	}
}
