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
	hub.monitorLocked()
	ws := &watchSub{hub: hub, lw: lw, name: name, ch: make(chan struct{}, 1), gone: make(chan struct{}), drops: hub.drops}
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
	// drops is the count of connection drops (watchHub.drops) it has
	// reported or that came before it.
	drops uint64
	once  sync.Once
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
// backend closed) or the connection to etcd dropped meanwhile. A watch
// survives a dropped connection (the etcd client resumes it where it
// stopped), but the holders cannot be read meanwhile, so Wait says so:
// the Client reports the error, reads the holders until it can, and so
// reports what changed meanwhile.
func (ws *watchSub) Wait(ctx context.Context) error {
	dropped, err := ws.dropped()
	if err != nil {
		return err
	}
	select {
	case <-ws.ch:
		_, err := ws.dropped() // a drop outranks the events it let through
		return err
	case <-ws.gone:
		return fmt.Errorf("etcd: watching %q: the watch ended", ws.name)
	case <-dropped:
		_, err := ws.dropped()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dropped returns an error if the connection dropped since the
// subscription last looked, and otherwise the channel closed at the next
// drop.
func (ws *watchSub) dropped() (<-chan struct{}, error) {
	hub := ws.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.drops != ws.drops {
		ws.drops = hub.drops
		return nil, fmt.Errorf("etcd: watching %q: the connection to etcd dropped: %w", ws.name, dlock.ErrBackendUnavailable)
	}
	return hub.dropCh, nil
}

// monitorLocked starts, once, the goroutine that counts the drops of the
// client's connection (every endpoint lost: the gRPC connection leaves
// the Ready state) for the watchers, until the hub closes.
func (hub *watchHub) monitorLocked() {
	if hub.stopMonitor != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	hub.stopMonitor, hub.dropCh = cancel, make(chan struct{})
	conn := hub.b.cli.ActiveConnection()
	hub.wg.Add(1)
	go func() {
		defer hub.wg.Done()
		for st := conn.GetState(); conn.WaitForStateChange(ctx, st); st = conn.GetState() {
			if st != connectivity.Ready {
				continue
			}
			hub.mu.Lock()
			hub.drops++
			close(hub.dropCh)
			hub.dropCh = make(chan struct{})
			hub.mu.Unlock()
		}
	}()
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
