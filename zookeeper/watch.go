package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// Elections and watching: an election is a queue of limit 1 whose
// children carry the candidates' values (see weighted.go); Proclaim
// rewrites the leader's node and Watch follows a lock's container with
// ZooKeeper's own watches.

var (
	_ dlock.Proclaimer = (*Backend)(nil)
	_ dlock.Watcher    = (*Backend)(nil)
)

// Proclaim replaces the value in the node of hold h, conditional on the
// data version it read; the write fires the watches of the name's
// subscriptions.
func (b *Backend) Proclaim(ctx context.Context, h dlock.Hold, value string) error {
	return b.rewrite(ctx, h, "proclaim", func(d *nodeData) error {
		d.Value = value
		return nil
	})
}

// Watch subscribes to the changes of a lock's holders: a children watch
// on the lock's container (a grant by creation, a release, a waiter that
// leaves, a session that ends) and a data watch on each of its children
// (a new value, a reentry, a downgrade, and the write that a waiter
// granted by a release makes, see wwaiter.grant). While the container
// does not exist, an exists watch waits for its creation. Watches of
// ZooKeeper fire once: the subscription sets them again before Wait
// returns, so that no change after that is missed. They outlive a
// reconnection of the session; the end of the session ends the
// subscription (Wait returns an error and the Client subscribes again).
func (b *Backend) Watch(ctx context.Context, name string) (dlock.Subscription, error) {
	s := &subscription{b: b, parent: b.lockPath(name), data: make(map[string]<-chan zk.Event)}
	if err := s.arm(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// subscription is a watch of one lock's container and children.
type subscription struct {
	b      *Backend
	parent string
	armed  bool
	kids   <-chan zk.Event            // the container's children watch, or its exists watch while it is missing
	data   map[string]<-chan zk.Event // the children's data watches
}

type childrenResult struct {
	kids  []string
	watch <-chan zk.Event
}

// arm sets the watches that are not pending.
func (s *subscription) arm(ctx context.Context) error {
	b := s.b
	var kids []string
	if s.kids == nil {
		r, err := call(b, ctx, func() (childrenResult, error) {
			for range 8 {
				kids, _, ch, err := b.conn.ChildrenW(s.parent)
				if !errors.Is(err, zk.ErrNoNode) {
					return childrenResult{kids, ch}, err
				}
				ok, _, ch, err := b.conn.ExistsW(s.parent)
				if err != nil || !ok {
					return childrenResult{watch: ch}, err
				}
				// Made meanwhile: the exists watch stays set until the
				// container changes; list its children instead.
			}
			return childrenResult{}, errors.New("the container kept coming and going")
		})
		if err != nil {
			return b.unavailable("watch "+s.parent, err)
		}
		s.kids, kids = r.watch, r.kids
	} else {
		var err error
		kids, err = b.children(ctx, s.parent)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return b.unavailable("list "+s.parent, err)
		}
	}
	for _, k := range kids {
		if childSeq(k) < 0 || s.data[k] != nil {
			continue
		}
		_, ch, err := b.existsW(ctx, s.parent+"/"+k)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			// Gone already: the children watch tells.
		case err != nil:
			return b.unavailable("watch "+s.parent+"/"+k, err)
		default:
			s.data[k] = ch
		}
	}
	s.armed = true
	return nil
}

// Wait blocks until a watch fires, then sets the watches again.
func (s *subscription) Wait(ctx context.Context) error {
	b := s.b
	if !s.armed {
		// A previous arm failed: what changed meanwhile is unknown.
		return s.arm(ctx)
	}
	names := make([]string, 0, len(s.data))
	cases := make([]reflect.SelectCase, 0, len(s.data)+3)
	for name, ch := range s.data {
		names = append(names, name)
		cases = append(cases, recvCase(ch))
	}
	n := len(cases)
	cases = append(cases, recvCase(ctx.Done()), recvCase(b.quit), recvCase(s.kids))
	i, v, ok := reflect.Select(cases)
	switch {
	case i == n:
		return ctx.Err()
	case i == n+1:
		return dlock.ErrClosed
	}
	var ev zk.Event
	if ok {
		ev = v.Interface().(zk.Event)
	}
	if i < n {
		delete(s.data, names[i])
	} else {
		s.kids = nil
	}
	if !ok || ev.Type == zk.EventNotWatching {
		return fmt.Errorf("%w: the watch of %s ended: %v", dlock.ErrBackendUnavailable, s.parent, ev.Err)
	}
	// Take in the other watches that fired too.
	for name, ch := range s.data {
		select {
		case _, ok := <-ch:
			delete(s.data, name)
			if !ok {
				return fmt.Errorf("%w: the watch of %s ended", dlock.ErrBackendUnavailable, s.parent)
			}
		default:
		}
	}
	s.armed = false
	return s.arm(ctx)
}

// Close ends the subscription. ZooKeeper has no way to take back a watch
// in go-zookeeper: the pending ones fire, into nothing, at the next
// change of their nodes.
func (s *subscription) Close() error { return nil }
