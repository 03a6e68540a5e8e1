package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dlock-dev/dlock"
	"google.golang.org/grpc/connectivity"
)

var _ dlock.Watcher = (*Backend)(nil)

// Watch subscribes to changes of the holders of name, of any kind: it
// joins the backend's watch of the name's prefix that sees puts as well as
// deletions (the one its weighted waiters share, opened if need be), and
// returns once etcd has created that watch, so that every change after
// it is seen. Every put or deletion under the prefix — a grant, an
// enqueued waiter, a release, an expiry (etcd deletes the keys of an
// expired lease), a downgrade, a new value — signals the subscription.
// Nothing is written: a grant costs no more for being watched.
func (b *Backend) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	lp := b.lockPrefix(name)
	hub := &b.hub
	hub.mu.Lock()
	lw := hub.useLocked(lp+"\x00", lp, true)
	if lw == nil {
		hub.mu.Unlock()
		return nil, errors.New("etcd: the backend is closed")
	}
	ws := &watchSub{hub: hub, lw: lw, name: name, ch: make(chan struct{}, 1), gone: make(chan struct{})}
	lw.watchers = append(lw.watchers, ws)
	hub.mu.Unlock()
	select {
	case <-lw.created:
	case <-ctx.Done():
		ws.Close()
		return nil, ctx.Err()
	}
	select {
	case <-ws.gone:
		ws.Close()
		return nil, fmt.Errorf("etcd: watching %q: the watch ended as it began (the member may have no leader)", name)
	default:
	}
	return ws, nil
}

// watchSub is one Watch subscription.
type watchSub struct {
	hub  *watchHub
	lw   *lockWatch // nil once closed
	name string
	ch   chan struct{} // a change since the last Wait
	gone chan struct{} // closed when the watch ended
	once sync.Once
}

// signal records a change for the next Wait.
func (ws *watchSub) signal() {
	select {
	case ws.ch <- struct{}{}:
	default:
	}
}

// endLocked tells the subscription that its watch ended.
func (ws *watchSub) endLocked() { ws.once.Do(func() { close(ws.gone) }) }

// Wait returns when the name's keys changed since the subscription was
// made or the previous Wait returned, or with an error when the watch
// ended (the member lost its leader, the history was compacted, the
// backend closed) or the connection to etcd dropped. A watch survives a
// dropped connection (the etcd client resumes it where it stopped), but
// the holders cannot be read meanwhile, so Wait says so: the Client
// reports the error, reads the holders until it can, and so reports what
// changed meanwhile.
func (ws *watchSub) Wait(ctx context.Context) error {
	select {
	case <-ws.ch:
		return nil
	case <-ws.gone:
		return fmt.Errorf("etcd: watching %q: the watch ended", ws.name)
	default:
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dropped := make(chan struct{})
	go ws.hub.b.connDropped(wctx, dropped)
	select {
	case <-ws.ch:
		return nil
	case <-ws.gone:
		return fmt.Errorf("etcd: watching %q: the watch ended", ws.name)
	case <-dropped:
		return fmt.Errorf("etcd: watching %q: the connection to etcd dropped: %w", ws.name, dlock.ErrBackendUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connDropped closes dropped when the client's connection leaves the
// Ready state (every endpoint lost) before ctx ends. A connection that is
// not ready yet is waited for first: only a drop seen now counts.
func (b *Backend) connDropped(ctx context.Context, dropped chan struct{}) {
	conn := b.cli.ActiveConnection()
	st := conn.GetState()
	for st != connectivity.Ready {
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
		st = conn.GetState()
	}
	if conn.WaitForStateChange(ctx, connectivity.Ready) {
		close(dropped)
	}
}

// Close ends the subscription; the watch closes watchLinger after its
// last user left.
func (ws *watchSub) Close() error {
	hub := ws.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	lw := ws.lw
	if lw == nil {
		return nil
	}
	ws.lw = nil
	lw.watchers = slices.DeleteFunc(lw.watchers, func(x *watchSub) bool { return x == ws })
	hub.leaveLocked(lw)
	return nil
}
