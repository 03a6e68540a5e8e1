package postgres

import (
	"context"
	"database/sql"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// listenFeed is a [sqllock.Feed] on LISTEN: one connection outside the
// engine's pool LISTENs on the lease table's channel while there are
// waiters. A notification (a lock freed, a fair waiter gone) names the
// first live fair waiter queued for the lock, which alone is woken, or
// nobody when none is queued, which wakes them all. A lost listening
// connection wakes them too (they then look for themselves) and is
// replaced after reconnectDelay.
type listenFeed struct {
	acquire func(context.Context) (listenConn, error)
	table   string             // the lease table, whose channel it listens on
	feed    *sqllock.WatchFeed // whose Notice gets each notification's payload
	lender  lender
	hub     watchHub // gets the watch notifications
}

// listenConn is a connection to LISTEN on. sc, if set, is the same
// connection as database/sql's, which statements may borrow while it
// waits for notifications; release discards it.
type listenConn struct {
	pc      *pgx.Conn
	sc      *sql.Conn
	release func()
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

func newListenFeed(table string, acquire func(context.Context) (listenConn, error)) *listenFeed {
	f := &listenFeed{acquire: acquire, table: table}
	f.feed = sqllock.NewWatchFeed(f.run)
	f.feed.Linger(listenLinger)
	f.feed.SetLender(&f.lender)
	return f
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
// listening, and reports each notification's payload to the feed's
// Notice (which wakes the fair waiter it names, or every waiter) until
// the connection fails or ctx is done. While it waits, the process's
// statements may borrow the connection (see lender).
func (f *listenFeed) listen(ctx context.Context, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	lc, err := f.acquire(cctx)
	if err != nil {
		cancel()
		return err
	}
	defer lc.release()
	conn := lc.pc
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{channel(f.table)}.Sanitize())
	if err == nil {
		err = register(cctx, conn, f.table)
	}
	cancel()
	if err != nil {
		return err
	}
	defer unregister(conn, f.table)
	// Rows of watches on connections that are gone (this process's
	// earlier one, other processes'): they would cost notifications.
	pid := conn.PgConn().PID()
	cctx, cancel = context.WithTimeout(ctx, listenConnectTimeout)
	listenerGone(cctx, conn, f.table, 0)
	cancel()
	f.hub.listening(pid)
	defer func() {
		f.hub.stopped()
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		listenerGone(cctx, conn, f.table, pid)
	}()
	f.lender.offer(lc.sc, conn.PgConn().Conn())
	defer f.lender.retire()
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		back := f.lender.handOver(!conn.IsClosed())
		if n != nil {
			if name, ok := strings.CutPrefix(n.Payload, watchPrefix); ok {
				f.hub.notice(name)
			} else {
				f.feed.Notice(n.Payload)
			}
		}
		if back != nil {
			<-back // the borrower's statement ends: its context bounds it
			if err != nil && pgconn.Timeout(err) && ctx.Err() == nil {
				err = nil // the borrower's interruption
			}
		}
		if err != nil {
			return err
		}
	}
}

// lender lends the listening connection to the process's statements (see
// [sqllock.Lender]) while it waits for notifications: a process that
// waits for a lock then holds one connection of the server's, not two.
// To take the connection, a borrower ends the listener's wait with a read
// deadline in the past; a read that times out leaves pgx's connection
// usable, and the notifications that arrive meanwhile are kept by pgx
// until the listener waits again.
type lender struct {
	mu    sync.Mutex
	sc    *sql.Conn // the listening connection, nil while there is none
	nc    net.Conn  // its socket
	busy  bool      // a borrower asked for it, or has it
	ready chan bool // to the borrower that asked: whether it got it
	back  chan struct{}
}

// offer makes sc, whose socket is nc, lendable; nil lends nothing.
func (l *lender) offer(sc *sql.Conn, nc net.Conn) {
	l.mu.Lock()
	l.sc, l.nc = sc, nc
	l.mu.Unlock()
}

// retire ends the offer: the listener stops.
func (l *lender) retire() {
	l.handOver(false)
	l.mu.Lock()
	l.sc = nil
	l.mu.Unlock()
}

// handOver is called by the listener when its wait has returned: if a
// borrower asked, it gets the connection if ok (the connection works), and
// handOver returns the channel closed when the connection is given back.
func (l *lender) handOver(ok bool) (back <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ready == nil {
		return nil
	}
	l.nc.SetReadDeadline(time.Time{})
	l.ready <- ok
	l.ready = nil
	if !ok {
		l.busy = false
		return nil
	}
	return l.back
}

// Lend implements [sqllock.Lender].
func (l *lender) Lend() (*sql.Conn, func(), bool) {
	l.mu.Lock()
	if l.sc == nil || l.busy {
		l.mu.Unlock()
		return nil, nil, false
	}
	ready, back, sc := make(chan bool, 1), make(chan struct{}), l.sc
	l.busy, l.ready, l.back = true, ready, back
	l.nc.SetReadDeadline(time.Now()) // ends the listener's wait
	l.mu.Unlock()
	if !<-ready {
		return nil, nil, false
	}
	return sc, func() {
		l.mu.Lock()
		l.busy = false
		l.mu.Unlock()
		close(back)
	}, true
}
