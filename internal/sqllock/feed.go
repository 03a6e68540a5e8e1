package sqllock

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
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

// PollFeed is a [Feed] that runs a query returning one integer which
// changes whenever another connection commits — SQLite's PRAGMA
// data_version — on one pinned connection, every Min at first after a
// change, backing off to every Max while nothing changes. It runs only
// while it has subscribers: the goroutine starts with the first and stops
// with the last, and Close waits for it.
type PollFeed struct {
	conn     func(context.Context) (*sql.Conn, error)
	query    string
	min, max time.Duration

	mu     sync.Mutex
	subs   int
	gen    chan struct{} // closed at the next change seen
	stop   chan struct{} // closed to stop the running poller; nil when none runs
	done   chan struct{} // closed when the last poller started has stopped
	ready  chan struct{} // closed when the running poller has its baseline
	closed bool
}

// NewPollFeed returns a PollFeed that pins a connection from conn and
// polls query on it. The connection is given back when the poller stops.
func NewPollFeed(conn func(context.Context) (*sql.Conn, error), query string, min, max time.Duration) *PollFeed {
	return &PollFeed{conn: conn, query: query, min: min, max: max, gen: make(chan struct{})}
}

type pollSub struct {
	f    *PollFeed
	once sync.Once
}

func (s *pollSub) Changed() <-chan struct{} {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.f.gen
}

func (s *pollSub) Close() { s.once.Do(s.f.unsubscribe) }

// Subscribe registers a subscriber, starting the poller if it is the first,
// and returns once the poller has read its baseline (or failed to: then it
// reports a change at every failed poll, so that waiters look for
// themselves).
func (f *PollFeed) Subscribe(ctx context.Context) (Subscription, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, dlock.ErrClosed
	}
	f.subs++
	if f.stop == nil {
		prev := f.done
		f.stop, f.done, f.ready = make(chan struct{}), make(chan struct{}), make(chan struct{})
		go f.run(prev, f.stop, f.done, f.ready)
	}
	ready := f.ready
	f.mu.Unlock()
	s := &pollSub{f: f}
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
}

func (f *PollFeed) unsubscribe() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs--
	if f.subs == 0 && f.stop != nil {
		close(f.stop)
		f.stop = nil
	}
}

// broadcast wakes every subscriber.
func (f *PollFeed) broadcast() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gen)
	f.gen = make(chan struct{})
}

// Close stops the poller and waits for it.
func (f *PollFeed) Close() error {
	f.mu.Lock()
	f.closed = true
	if f.stop != nil {
		close(f.stop)
		f.stop = nil
	}
	done := f.done
	f.mu.Unlock()
	if done != nil {
		<-done
	}
	f.broadcast()
	return nil
}

// pollTimeout bounds one poll.
const pollTimeout = 5 * time.Second

func (f *PollFeed) run(prev, stop, done, ready chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev // the previous poller has given its connection back
	}
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
			f.broadcast()
			interval = f.min
		default:
			interval = min(interval*2, f.max)
		}
		return nil
	}
	for {
		if err := poll(); err != nil {
			// Let the waiters look for themselves, and try again later.
			f.broadcast()
			interval = f.max
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		t := time.NewTimer(interval)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
