package sqllock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/notify"
)

// Watching a name's holders; see the package doc's "Elections and
// watching".

var _ dlock.Watcher = (*Backend)(nil)

// WatchFunc subscribes to the changes of one name by the store's own push
// mechanism (PostgreSQL's LISTEN/NOTIFY); see [dlock.Watcher]. The
// backend's package gives it in [Setup.Watch].
type WatchFunc func(ctx context.Context, name string) (dlock.Subscription, error)

// WatchPoll is how often a watch looks again on a store that cannot push
// changes (MySQL, or PostgreSQL over a driver other than pgx): a change in
// another process is seen within it, one in this process at once.
const WatchPoll = 250 * time.Millisecond

// watching is the in-process side of watches: every change this engine
// makes to a name's holders wakes this process's watches at once, so that
// they need not wait for the store's signal. It costs nothing (one atomic
// load) while nothing watches.
type watching struct {
	n  atomic.Int64 // open watches
	bc notify.Broadcast
}

// changed wakes this process's watches after a change of name's holders.
func (e *Engine) changed(string) {
	if e.watch.n.Load() > 0 {
		e.watch.bc.Broadcast()
	}
}

// Watch implements [dlock.Watcher]: it returns once subscribed. On
// PostgreSQL (over pgx) a NOTIFY on the lease table's channel signals a
// change of the name, sent by triggers only while a watchers row names it;
// on SQLite the Feed's data_version check signals every commit of another
// connection; on MySQL, which has no push, the subscription polls every
// [WatchPoll]. In every case a change this process makes signals at once.
func (b *Backend) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	return b.e.Watch(ctx, name)
}

// Watch implements [dlock.Watcher]; see [Backend.Watch].
func (e *Engine) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	s := &watchSub{e: e, poll: WatchPoll}
	e.watch.n.Add(1)
	s.local = e.watch.bc.Wait()
	switch {
	case e.watchFn != nil:
		sub, err := e.watchFn(ctx, name)
		if err != nil {
			e.watch.n.Add(-1)
			return nil, e.wrap(err)
		}
		s.store, s.poll = sub, 0
	case e.local.feed != nil:
		sub, err := e.local.feed.Subscribe(ctx)
		if err != nil {
			e.watch.n.Add(-1)
			return nil, e.wrap(err)
		}
		s.feed, s.remote, s.poll = sub, sub.Changed(), 0
	}
	return s, nil
}

// watchSub is a watch of one name: the in-process signal, and the
// store's (a WatchFunc's subscription, a Feed's generation, or a poll).
type watchSub struct {
	e      *Engine
	local  <-chan struct{}
	store  dlock.Subscription // WatchFunc's
	feed   Subscription       // the Feed's
	remote <-chan struct{}    // the Feed's generation
	poll   time.Duration      // without a push: look again after it
	closed atomic.Bool
}

// Wait implements [dlock.Subscription].
func (s *watchSub) Wait(ctx context.Context) error {
	if s.closed.Load() {
		return dlock.ErrClosed
	}
	var err error
	switch {
	case s.store != nil:
		// The store's Wait, cut short by a change in this process.
		wctx, cancel := context.WithCancel(ctx)
		stop, local := make(chan struct{}), s.local
		go func() {
			select {
			case <-local:
				cancel()
			case <-stop:
			}
		}()
		err = s.store.Wait(wctx)
		close(stop)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			err = nil // woken by this process
		}
	default:
		var tick <-chan time.Time
		if s.poll > 0 {
			t := time.NewTimer(s.poll)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-s.local:
		case <-s.remote:
		case <-tick:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	// The next changes, taken before the Client reads the holders.
	s.local = s.e.watch.bc.Wait()
	if s.feed != nil {
		s.remote = s.feed.Changed()
	}
	if err == nil && s.e.closed.Load() {
		err = dlock.ErrClosed
	}
	return err
}

// Close implements [dlock.Subscription].
func (s *watchSub) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.e.watch.n.Add(-1)
	if s.feed != nil {
		s.feed.Close()
	}
	if s.store != nil {
		return s.store.Close()
	}
	return nil
}
