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
	wg     sync.WaitGroup // the watches' dispatchers and the monitor

	// For Watch: how often the connection dropped, a channel closed at
	// the next drop, and the end of the goroutine that counts them.
	drops       uint64
	dropCh      chan struct{}
	stopMonitor context.CancelFunc
}

// lockWatch is the watch on one lock's prefix, or on one key, and the
// waiters on it. A weighted name's watch (puts) also sees the puts under
// the prefix, for downgrades, and has a key of its own in byLock.
type lockWatch struct {
	id     string // the key in byLock: lp, or lp+"\x00" for a weighted name's
	lp     string // the prefix (ending in "/") or the key
	puts   bool
	cancel context.CancelFunc
	ready  bool  // created: floor is known
	floor  int64 // every deletion under lp after floor is in deleted or still to come
	// deleted holds the deletions dispatched after floor, by key.
	deleted map[string]int64
	subs    map[string][]*subscription // by the key they wait on
	// lowered holds the downgrades dispatched after floor, by key (puts).
	lowered map[string]lowering
	ahead   []*subscription // the weighted waiters
	// watchers are the Watch subscriptions (on a watch with puts);
	// created is closed once the watch is created or has ended.
	watchers []*watchSub
	created  chan struct{}
	users    int
	idle     *time.Timer
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

	// A weighted waiter's: its own key's create revision, and the keys
	// before it, which the watch's events change. fit says the waiter was
	// woken because they now fit, as the watch, which missed nothing since
	// seen, tells; set before woken is closed.
	ownRev int64
	ah     *ahead
	fit    bool
}

// lowering is a downgrade seen by a weighted name's watch: the key, made
// at rev, weighs weight since modRev.
type lowering struct {
	modRev, rev int64
	weight      int
}

// subscribe registers a waiter for the deletion of key, which existed at
// revision seen, on the watch of lp: key's lock prefix, or key itself. It
// never waits on etcd.
func (hub *watchHub) subscribe(lp, key string, seen int64) *subscription {
	s := &subscription{hub: hub, key: key, seen: seen, woken: make(chan struct{}), read: make(chan struct{}, 1)}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	lw := hub.joinLocked(s, lp, lp, false)
	if lw == nil {
		return s
	}
	lw.subs[key] = append(lw.subs[key], s)
	if lw.ready {
		s.judgeLocked()
	}
	return s
}

// subscribeAhead registers a weighted waiter, whose key own was created
// at ownRev, on the watch of its lock's prefix lp: it is woken when the
// keys before it, ah as read at revision seen, fit (then fit is set), when
// its own key is deleted, or when the watch cannot tell (it began after
// seen, or ended): then the waiter reads the queue again. The watch's
// events change ah until the subscription stops. It never waits on etcd.
func (hub *watchHub) subscribeAhead(lp, own string, ownRev, seen int64, ah *ahead) *subscription {
	s := &subscription{hub: hub, key: own, seen: seen, ownRev: ownRev, ah: ah,
		woken: make(chan struct{}), read: make(chan struct{}, 1)}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	lw := hub.joinLocked(s, lp+"\x00", lp, true)
	if lw == nil {
		return s
	}
	lw.ahead = append(lw.ahead, s)
	if lw.ready {
		s.judgeAheadLocked()
	}
	return s
}

// joinLocked adds s to the watch id of lp, opening it if need be; nil if
// the hub is closed (then s is woken).
func (hub *watchHub) joinLocked(s *subscription, id, lp string, puts bool) *lockWatch {
	lw := hub.useLocked(id, lp, puts)
	if lw == nil {
		s.wakeLocked()
		return nil
	}
	s.lw = lw
	return lw
}

// useLocked counts a user of the watch id of lp, opening it if need be;
// nil if the hub is closed.
func (hub *watchHub) useLocked(id, lp string, puts bool) *lockWatch {
	if hub.closed {
		return nil
	}
	lw := hub.byLock[id]
	if lw == nil {
		lw = hub.openLocked(id, lp, puts)
	}
	lw.users++
	if lw.idle != nil {
		lw.idle.Stop()
		lw.idle = nil
	}
	return lw
}

// leaveLocked counts a user less of lw, which closes watchLinger after
// its last user left.
func (hub *watchHub) leaveLocked(lw *lockWatch) {
	lw.users--
	if lw.users == 0 && hub.byLock[lw.id] == lw {
		lw.idle = time.AfterFunc(watchLinger, func() {
			hub.mu.Lock()
			defer hub.mu.Unlock()
			if lw.users == 0 && hub.byLock[lw.id] == lw {
				delete(hub.byLock, lw.id)
				lw.cancel()
			}
		})
	}
}

// judgeAheadLocked applies to a weighted waiter's keys what the watch saw
// after seen, once the watch is created, and wakes the waiter if they fit,
// if its key is gone, or if the watch began after seen (it cannot tell).
func (s *subscription) judgeAheadLocked() {
	lw := s.lw
	switch {
	case s.seen < lw.floor, lw.deleted[s.key] > s.ownRev:
		s.wakeLocked()
		return
	}
	for k := range s.ah.keys {
		if lw.deleted[k] > s.seen {
			s.ah.drop(k)
		} else if lo, ok := lw.lowered[k]; ok && lo.modRev > s.seen {
			s.ah.lower(k, lo.rev, lo.weight)
		}
	}
	s.fitLocked()
}

// applyLocked applies an event the watch dispatched after seen to a
// weighted waiter's keys.
func (s *subscription) applyLocked(ev *clientv3.Event) {
	k := string(ev.Kv.Key)
	switch {
	case k == s.key:
		if ev.Type == clientv3.EventTypeDelete {
			s.wakeLocked() // the waiter's key is gone
		}
		return
	case ev.Type == clientv3.EventTypeDelete:
		s.ah.drop(k)
	default:
		s.ah.lower(k, ev.Kv.CreateRevision, decode(ev.Kv).Weight)
	}
	s.fitLocked()
}

// fitLocked wakes a weighted waiter whose keys before it fit.
func (s *subscription) fitLocked() {
	if !s.done && s.ah.fits() {
		s.fit = true
		s.wakeLocked()
	}
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

// endLocked wakes s at the end of its watch.
func (s *subscription) endLocked() {
	if !s.done {
		s.ended = true
	}
	s.wakeLocked()
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
	if s.ah != nil {
		lw.ahead = slices.DeleteFunc(lw.ahead, func(x *subscription) bool { return x == s })
	} else if q := lw.subs[s.key]; q != nil {
		if q = slices.DeleteFunc(q, func(x *subscription) bool { return x == s }); len(q) == 0 {
			delete(lw.subs, s.key)
		} else {
			lw.subs[s.key] = q
		}
	}
	hub.leaveLocked(lw)
}

// openLocked starts the watch id of lp, a lock prefix or a key; with
// puts, it also sees the puts (a weighted name's).
func (hub *watchHub) openLocked(id, lp string, puts bool) *lockWatch {
	// The watch outlives every waiter; it ends with the backend, after
	// watchLinger without waiters, or when the member loses its leader.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	lw := &lockWatch{id: id, lp: lp, puts: puts, cancel: cancel, deleted: make(map[string]int64),
		subs: make(map[string][]*subscription), created: make(chan struct{})}
	if hub.byLock == nil {
		hub.byLock = make(map[string]*lockWatch)
	}
	hub.byLock[id] = lw
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if puts {
		lw.lowered = make(map[string]lowering)
	} else {
		opts = append(opts, clientv3.WithFilterPut())
	}
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
			close(lw.created)
			for _, q := range lw.subs {
				for _, s := range q {
					s.judgeLocked()
				}
			}
			for _, s := range lw.ahead {
				s.judgeAheadLocked()
			}
		}
		if len(resp.Events) > 0 {
			for _, ws := range lw.watchers {
				ws.signal()
			}
		}
		for _, ev := range resp.Events {
			k, rev := string(ev.Kv.Key), ev.Kv.ModRevision
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				lw.deleted[k] = rev
				for _, s := range lw.subs[k] {
					if rev > s.seen {
						s.wakeLocked()
					}
				}
			case ev.IsModify() && lw.puts:
				lw.lowered[k] = lowering{modRev: rev, rev: ev.Kv.CreateRevision, weight: decode(ev.Kv).Weight}
			default:
				continue // a new key
			}
			for _, s := range lw.ahead {
				if rev > s.seen {
					s.applyLocked(ev)
				}
			}
		}
		lw.pruneLocked()
		hub.mu.Unlock()
	}
	hub.mu.Lock()
	if hub.byLock[lw.id] == lw {
		delete(hub.byLock, lw.id)
	}
	if lw.idle != nil {
		lw.idle.Stop()
	}
	for _, q := range lw.subs {
		for _, s := range q {
			s.endLocked()
		}
	}
	for _, s := range lw.ahead {
		s.endLocked()
	}
	if !lw.ready {
		close(lw.created)
	}
	for _, ws := range lw.watchers {
		ws.endLocked()
	}
	hub.mu.Unlock()
}

// pruneLocked forgets the older half of the remembered deletions when
// there are too many, raising the floor past them.
func (lw *lockWatch) pruneLocked() {
	if len(lw.lowered) > recentDeletes {
		for _, lo := range lw.lowered {
			lw.floor = max(lw.floor, lo.modRev)
		}
		clear(lw.lowered)
	}
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
	if hub.stopMonitor != nil {
		hub.stopMonitor()
	}
	for _, lw := range hub.byLock {
		if lw.idle != nil {
			lw.idle.Stop()
		}
		lw.cancel()
	}
	hub.mu.Unlock()
	hub.wg.Wait()
}
