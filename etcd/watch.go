package etcd

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchLinger is how long a lock's watch stays open after its last waiter
// left, so that a lock under steady contention keeps one watch.
const watchLinger = 2 * time.Second

// recentDeletes bounds the deletions a lock's watch remembers for waiters
// that subscribe after the deletion was dispatched.
const recentDeletes = 1024

// watchHub multiplexes the backend's waiters over long-lived etcd watches,
// each on a lock's prefix (for waiters near the head of a queue) or on one
// key (the predecessor of a waiter further back, so that a long queue of
// many clients does not send every deletion to every client), opened by
// its first waiter and closed watchLinger after its last left. A watch per wait would cost
// a round trip per wait, and etcd serves a watch it could not put in its
// "synced" group at creation (a write landed between its reading of the
// current revision and the registration, common under contention) from a
// loop that runs every 100 ms: the tail of every hand-off.
type watchHub struct {
	b      *Backend
	mu     sync.Mutex
	byLock map[string]*lockWatch
	closed bool
	wg     sync.WaitGroup // the watches' dispatchers
}

// lockWatch is the watch on one lock's prefix, or on one key, and the
// waiters on it.
type lockWatch struct {
	lp     string // the prefix (ending in "/") or the key
	cancel context.CancelFunc
	ready  bool  // created: floor is known
	floor  int64 // every deletion under lp after floor is in deleted or still to come
	// deleted holds the deletions dispatched after floor, by key.
	deleted map[string]int64
	subs    map[string][]*subscription // by the key they wait on
	users   int
	idle    *time.Timer
}

// subscription is one waiter's interest in the deletion of key, which
// existed at revision seen.
type subscription struct {
	hub  *watchHub
	lw   *lockWatch
	key  string
	seen int64
	// woken is closed when the key is deleted or the watch ended (look
	// again); read gets a value when the watch cannot tell whether the key
	// was deleted after seen, so the waiter must read it.
	woken chan struct{}
	read  chan struct{}
	done  bool // woken is closed
	ended bool // by the end of the watch; set before woken is closed
}

// subscribe registers a waiter for the deletion of key, which existed at
// revision seen, on the watch of lp: key's lock prefix, or key itself. It
// never waits on etcd.
func (hub *watchHub) subscribe(lp, key string, seen int64) *subscription {
	s := &subscription{hub: hub, key: key, seen: seen, woken: make(chan struct{}), read: make(chan struct{}, 1)}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.closed {
		s.wakeLocked()
		return s
	}
	lw := hub.byLock[lp]
	if lw == nil {
		lw = hub.openLocked(lp)
	}
	s.lw = lw
	lw.users++
	if lw.idle != nil {
		lw.idle.Stop()
		lw.idle = nil
	}
	lw.subs[key] = append(lw.subs[key], s)
	if lw.ready {
		s.judgeLocked()
	}
	return s
}

// judgeLocked decides, once the watch is created, whether the watch alone
// will tell s of its key's deletion.
func (s *subscription) judgeLocked() {
	switch {
	case s.lw.deleted[s.key] > s.seen: // not an earlier use of the key
		s.wakeLocked()
	case s.seen < s.lw.floor:
		select {
		case s.read <- struct{}{}:
		default:
		}
	}
}

func (s *subscription) wakeLocked() {
	if !s.done {
		s.done = true
		close(s.woken)
	}
}

// confirm records that a read at revision rev found the key still there.
func (s *subscription) confirm(rev int64) {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if s.lw == nil || s.done {
		return
	}
	if rev < s.lw.floor {
		s.wakeLocked() // cannot tell: look again
		return
	}
	s.seen = rev
	s.judgeLocked()
}

// allGone reports whether the watch has seen every one of keys, which
// existed at revision rev, deleted, and not own, created at ownRev.
func (s *subscription) allGone(keys []string, rev int64, own string, ownRev int64) bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	lw := s.lw
	if lw == nil || !lw.ready || lw.floor > rev || lw.deleted[own] > ownRev {
		return false
	}
	for _, k := range keys {
		if lw.deleted[k] <= rev {
			return false
		}
	}
	return true
}

// stop withdraws the subscription.
func (s *subscription) stop() {
	hub := s.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	lw := s.lw
	if lw == nil {
		return
	}
	s.lw = nil
	if q := lw.subs[s.key]; q != nil {
		if q = slices.DeleteFunc(q, func(x *subscription) bool { return x == s }); len(q) == 0 {
			delete(lw.subs, s.key)
		} else {
			lw.subs[s.key] = q
		}
	}
	lw.users--
	if lw.users == 0 && hub.byLock[lw.lp] == lw {
		lw.idle = time.AfterFunc(watchLinger, func() {
			hub.mu.Lock()
			defer hub.mu.Unlock()
			if lw.users == 0 && hub.byLock[lw.lp] == lw {
				delete(hub.byLock, lw.lp)
				lw.cancel()
			}
		})
	}
}

// openLocked starts the watch of lp, a lock prefix or a key.
func (hub *watchHub) openLocked(lp string) *lockWatch {
	// The watch outlives every waiter; it ends with the backend, after
	// watchLinger without waiters, or when the member loses its leader.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	lw := &lockWatch{lp: lp, cancel: cancel, deleted: make(map[string]int64), subs: make(map[string][]*subscription)}
	if hub.byLock == nil {
		hub.byLock = make(map[string]*lockWatch)
	}
	hub.byLock[lp] = lw
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify(), clientv3.WithFilterPut()}
	if strings.HasSuffix(lp, "/") {
		opts = append(opts, clientv3.WithPrefix())
	}
	wch := hub.b.cli.Watch(ctx, lp, opts...)
	hub.wg.Add(1)
	go hub.dispatch(lw, wch)
	return lw
}

// dispatch hands the deletions seen by lw's watch to its waiters until the
// watch ends; then it wakes them all to look again.
func (hub *watchHub) dispatch(lw *lockWatch, wch clientv3.WatchChan) {
	defer hub.wg.Done()
	defer lw.cancel()
	for resp := range wch {
		if resp.Canceled || resp.Err() != nil {
			break
		}
		hub.mu.Lock()
		if resp.Created {
			// etcd sends every event after the revision it answers with.
			lw.ready, lw.floor = true, resp.Header.Revision
			for _, q := range lw.subs {
				for _, s := range q {
					s.judgeLocked()
				}
			}
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			k, rev := string(ev.Kv.Key), ev.Kv.ModRevision
			lw.deleted[k] = rev
			for _, s := range lw.subs[k] {
				if rev > s.seen {
					s.wakeLocked()
				}
			}
		}
		lw.pruneLocked()
		hub.mu.Unlock()
	}
	hub.mu.Lock()
	if hub.byLock[lw.lp] == lw {
		delete(hub.byLock, lw.lp)
	}
	if lw.idle != nil {
		lw.idle.Stop()
	}
	for _, q := range lw.subs {
		for _, s := range q {
			if !s.done {
				s.ended = true
			}
			s.wakeLocked()
		}
	}
	hub.mu.Unlock()
}

// pruneLocked forgets the older half of the remembered deletions when
// there are too many, raising the floor past them.
func (lw *lockWatch) pruneLocked() {
	if len(lw.deleted) <= recentDeletes {
		return
	}
	revs := make([]int64, 0, len(lw.deleted))
	for _, r := range lw.deleted {
		revs = append(revs, r)
	}
	slices.Sort(revs)
	cut := revs[len(revs)/2]
	for k, r := range lw.deleted {
		if r <= cut {
			delete(lw.deleted, k)
		}
	}
	lw.floor = max(lw.floor, cut)
}

// close ends every watch and waits for their dispatchers.
func (hub *watchHub) close() {
	hub.mu.Lock()
	hub.closed = true
	for _, lw := range hub.byLock {
		if lw.idle != nil {
			lw.idle.Stop()
		}
		lw.cancel()
	}
	hub.mu.Unlock()
	hub.wg.Wait()
}
