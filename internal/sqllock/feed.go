package sqllock

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/notify"
)

// Feed tells waiters that another connection (another process) may have
// changed the store. SQLite's is [PollFeed] on PRAGMA data_version;
// PostgreSQL's can be LISTEN/NOTIFY.
type Feed interface {
	// Subscribe registers a waiter. When it returns, every change
	// committed after the call is reported on the Subscription.
	Subscribe(ctx context.Context) (Subscription, error)
	// Close stops the feed and waits for what it started.
	Close() error
}

// Subscription is a waiter's registration with a Feed.
type Subscription interface {
	// Changed returns a channel that is closed when a change committed
	// after the call (or earlier) is seen. Take it before looking at the
	// store, so that no change after the look is missed.
	Changed() <-chan struct{}
	// Close ends the subscription.
	Close()
}

// WatchFeed is a [Feed] that runs a watcher while it has subscribers (a
// [notify.Relay]): the watcher starts with the first and stops with the
// last, and Close waits for it.
type WatchFeed struct {
	relay  *notify.Relay
	turn   atomic.Pointer[func(seq int64)] // Local.turn of the Local it serves
	lender Lender
}

// Lender lends the connection that a watcher waits on to a statement, so
// that a process that waits for a lock holds one connection, not one to
// wait on and one for its attempts. Lend returns at once: the connection
// and the function that gives it back, or ok false when it cannot be lent
// now (not waiting, or lent already).
type Lender interface {
	Lend() (c *sql.Conn, giveBack func(), ok bool)
}

// NewWatchFeed returns a WatchFeed that runs watch until its ctx is done.
// watch calls ready once every change committed from then on will be seen
// (or once it failed to get there: then it calls changed at every failure,
// so that waiters look for themselves), and changed at every change.
func NewWatchFeed(watch func(ctx context.Context, ready, changed func())) *WatchFeed {
	f := &WatchFeed{}
	f.relay = notify.NewRelay(func(ctx context.Context, ready func()) { watch(ctx, ready, f.relay.Broadcast) })
	return f
}

// SetLender makes the statements of the engines on this feed borrow the
// watcher's connection from l while it waits (see [Lender]). Call it
// before the first Subscribe.
func (f *WatchFeed) SetLender(l Lender) { f.lender = l }

// lend borrows the watcher's connection, if it has a Lender.
func (f *WatchFeed) lend() (*sql.Conn, func(), bool) {
	if f.lender == nil {
		return nil, nil, false
	}
	return f.lender.Lend()
}

// Linger keeps the watcher running for d after the last waiter leaves
// (see [notify.Relay.Linger]). Call it before the first Subscribe.
func (f *WatchFeed) Linger(d time.Duration) { f.relay.Linger(d) }

// Subscribe registers a waiter, starting the watcher if it is the first,
// and returns once the watcher is ready.
func (f *WatchFeed) Subscribe(ctx context.Context) (Subscription, error) {
	s, err := f.relay.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Notice reports a change whose notification carried payload. A payload
// that is a decimal sequence number names the fair waiter whose turn it
// is (the first live one queued for the lock that was freed): only that
// waiter, if it is in this process, is woken, and the other waiters, who
// could not take the lock before it, sleep on (see Local.turn). Any
// other payload (an empty one: no fair waiter is queued) wakes every
// waiter, as a change does.
func (f *WatchFeed) Notice(payload string) {
	if seq, err := strconv.ParseInt(payload, 10, 64); err == nil {
		if turn := f.turn.Load(); turn != nil {
			(*turn)(seq)
			return
		}
	}
	f.relay.Broadcast()
}

// setTurn makes Notice hand the turns it is told of to turn.
func (f *WatchFeed) setTurn(turn func(seq int64)) { f.turn.Store(&turn) }

// Close stops the watcher and waits for it.
func (f *WatchFeed) Close() error {
	f.relay.Close()
	return nil
}

// PollFeed is a [WatchFeed] that runs a query returning one integer which
// changes whenever another connection commits — SQLite's PRAGMA
// data_version — on one pinned connection, every Min at first after a
// change, backing off to every Max while nothing changes. A failed poll
// counts as a change.
type PollFeed struct {
	*WatchFeed
	conn     func(context.Context) (*sql.Conn, error)
	query    string
	min, max time.Duration
}

// NewPollFeed returns a PollFeed that pins a connection from conn and
// polls query on it. The connection is given back when the poller stops.
func NewPollFeed(conn func(context.Context) (*sql.Conn, error), query string, min, max time.Duration) *PollFeed {
	f := &PollFeed{conn: conn, query: query, min: min, max: max}
	f.WatchFeed = NewWatchFeed(f.run)
	return f
}

// pollTimeout bounds one poll.
const pollTimeout = 5 * time.Second

func (f *PollFeed) run(stop context.Context, ready, changed func()) {
	var (
		conn     *sql.Conn
		last     int64
		have     bool
		interval = f.min
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	poll := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
		defer cancel()
		if conn == nil {
			c, err := f.conn(ctx)
			if err != nil {
				return err
			}
			conn = c
			have = false // a new connection has its own counter
		}
		var v int64
		if err := conn.QueryRowContext(ctx, f.query).Scan(&v); err != nil {
			conn.Close()
			conn = nil
			return err
		}
		switch {
		case !have:
			have, last = true, v
		case v != last:
			last = v
			changed()
			interval = f.min
		default:
			interval = min(interval*2, f.max)
		}
		return nil
	}
	for {
		if err := poll(); err != nil {
			// Let the waiters look for themselves, and try again later.
			changed()
			interval = f.max
		}
		ready()
		if dur.Sleep(stop, interval) != nil {
			return
		}
	}
}
