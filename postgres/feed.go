package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/jackc/pgx/v5"
)

// listenFeed is a [sqllock.Feed] on LISTEN: one connection outside the
// engine's pool LISTENs on the lease table's channel while there are
// waiters, and every notification (a lock freed, a fair waiter gone) wakes
// them all. A lost listening connection wakes them too (they then look
// for themselves) and is replaced after reconnectDelay.
type listenFeed struct {
	acquire func(context.Context) (*pgx.Conn, func(), error)
	channel string

	mu     sync.Mutex
	subs   int
	gen    chan struct{}
	stop   context.CancelFunc // stops the running listener; nil when none runs
	done   chan struct{}      // closed when the last listener started has stopped
	ready  chan struct{}      // closed when the running listener listens (or failed once)
	closed bool
}

// reconnectDelay is the pause between attempts to (re)establish the
// listening connection; waiters are woken at each failed attempt.
const reconnectDelay = 100 * time.Millisecond

// connectTimeout bounds one attempt to open the listening connection.
const listenConnectTimeout = 10 * time.Second

func newListenFeed(channel string, acquire func(context.Context) (*pgx.Conn, func(), error)) *listenFeed {
	return &listenFeed{acquire: acquire, channel: channel, gen: make(chan struct{})}
}

type listenSub struct {
	f    *listenFeed
	once sync.Once
}

func (s *listenSub) Changed() <-chan struct{} {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.f.gen
}

func (s *listenSub) Close() { s.once.Do(s.f.unsubscribe) }

// Subscribe registers a waiter, starting the listener if it is the first,
// and returns once the listener LISTENs (every notification committed
// after that reaches it) or has failed once (then waiters are woken at
// every failed reconnection, and look for themselves).
func (f *listenFeed) Subscribe(ctx context.Context) (sqllock.Subscription, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, dlock.ErrClosed
	}
	f.subs++
	if f.stop == nil {
		prev := f.done
		lctx, cancel := context.WithCancel(context.Background())
		f.stop, f.done, f.ready = cancel, make(chan struct{}), make(chan struct{})
		go f.run(lctx, prev, f.done, f.ready)
	}
	ready := f.ready
	f.mu.Unlock()
	s := &listenSub{f: f}
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
}

func (f *listenFeed) unsubscribe() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs--
	if f.subs == 0 && f.stop != nil {
		f.stop()
		f.stop = nil
	}
}

func (f *listenFeed) broadcast() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gen)
	f.gen = make(chan struct{})
}

// Close stops the listener and waits for it.
func (f *listenFeed) Close() error {
	f.mu.Lock()
	f.closed = true
	if f.stop != nil {
		f.stop()
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

func (f *listenFeed) run(ctx context.Context, prev, done, ready chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev
	}
	signalReady := func() {
		if ready != nil {
			close(ready)
			ready = nil
		}
	}
	defer signalReady()
	first := true
	for ctx.Err() == nil {
		err := f.listen(ctx, func() {
			if !first {
				// Notifications sent while no connection listened
				// are lost: let the waiters look.
				f.broadcast()
			}
			first = false
			signalReady()
		})
		if ctx.Err() != nil {
			return
		}
		_ = err
		f.broadcast()
		signalReady()
		first = false
		t := time.NewTimer(reconnectDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listen opens a connection, LISTENs, calls listening, and reports each
// notification until the connection fails or ctx is done.
func (f *listenFeed) listen(ctx context.Context, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	conn, release, err := f.acquire(cctx)
	if err != nil {
		cancel()
		return err
	}
	defer release()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{f.channel}.Sanitize())
	cancel()
	if err != nil {
		return err
	}
	listening()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		f.broadcast()
	}
}
