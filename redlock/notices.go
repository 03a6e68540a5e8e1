package redlock

import (
	"context"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// notices receives the release notices of one master for all the waiters
// of a Backend, on one pub/sub connection made with the first waiter. Each
// lock with waiters here has two subscriptions: to the lock's channel,
// where a release that frees it with nobody queued sends an empty notice
// for every waiter, and to the lock's channel for this Backend, where a
// release sends a notice that names the waiter that should try (the head
// of the fair queue, or of the queue of waiters that are not fair) when
// that waiter is one of this Backend's: only that waiter hears of it, and
// other processes get nothing. When the last waiter of a lock leaves, its
// subscriptions linger for a while (a lock waited on once is likely to be
// waited on again) and are then dropped. So a waiter costs no connection,
// and usually no SUBSCRIBE either.
type notices struct {
	b *Backend
	i int // the master

	mu      sync.Mutex
	subs    map[string]*noticeSub // by channel
	pending map[string]int        // SUBSCRIBEs sent and not yet confirmed, by channel
	names   map[string]int        // subscriptions by lock name
	idle    int                   // subscriptions without waiters, lingering
	ps      *goredis.PubSub
	closed  bool
	closing chan struct{}

	wmu sync.Mutex     // orders SUBSCRIBE and UNSUBSCRIBE writes
	wg  sync.WaitGroup // the reader
}

// noticeSub is the subscription to one lock's channel on one master.
type noticeSub struct {
	ch        string
	name      string // the lock's
	confirmed bool   // the master confirmed the SUBSCRIBE (since the connection was last made)
	waiters   []*waiter
	timer     *time.Timer // set while lingering without waiters
	gone      bool        // no longer in subs
}

const (
	// lingerTime is how long a subscription without waiters is kept.
	lingerTime = 10 * time.Second
	// maxIdle bounds the subscriptions without waiters kept lingering.
	maxIdle = 1024
	// subscribeTimeout bounds the write of a SUBSCRIBE or UNSUBSCRIBE.
	subscribeTimeout = 5 * time.Second
)

func (b *Backend) startNotices() {
	b.notices = make([]notices, len(b.nodes))
	for i := range b.notices {
		b.notices[i] = notices{b: b, i: i, subs: make(map[string]*noticeSub), pending: make(map[string]int), names: make(map[string]int), closing: make(chan struct{})}
	}
}

// attach makes w hear the notices on channel ch (one of its lock's) from
// this master, subscribing unless a subscription is there.
func (n *notices) attach(w *waiter, ch string) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	s := n.subs[ch]
	created := s == nil
	if created {
		s = &noticeSub{ch: ch, name: w.req.Name}
		n.subs[ch] = s
		n.names[s.name]++
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		n.idle--
	}
	s.waiters = append(s.waiters, w)
	n.mu.Unlock()
	if created {
		n.subscribe(s)
	}
}

// tryAttach attaches w if channel ch has a subscription here, and reports
// whether the master confirmed it: then every notice the master sends on
// ch from now on reaches w.
func (n *notices) tryAttach(w *waiter, ch string) (attached, confirmed bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[ch]
	if n.closed || s == nil || s.gone {
		return false, false
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		n.idle--
	}
	s.waiters = append(s.waiters, w)
	return true, s.confirmed
}

// waitedOn reports whether this Backend's waiters subscribed to the
// channels of lock name here (they may have left since), without
// allocating.
func (n *notices) waitedOn(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.names[name] > 0
}

// confirmed reports whether channel ch has a confirmed subscription here.
func (n *notices) confirmed(ch string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[ch]
	return s != nil && s.confirmed && !n.closed
}

// detach stops the notices on ch to w; a subscription left without
// waiters lingers.
func (n *notices) detach(w *waiter, ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[ch]
	if s == nil {
		return
	}
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
	}
	if len(s.waiters) > 0 || n.closed || s.timer != nil {
		return
	}
	linger := lingerTime
	if n.idle >= maxIdle {
		linger = 0
	}
	n.idle++
	s.timer = time.AfterFunc(linger, func() { n.expire(s) })
}

// expire drops a subscription that lingered without waiters.
func (n *notices) expire(s *noticeSub) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.mu.Lock()
	if n.closed || s.timer == nil || len(s.waiters) > 0 || s.gone {
		n.mu.Unlock()
		return
	}
	s.timer = nil
	n.idle--
	n.drop(s)
	ps := n.ps
	n.mu.Unlock()
	if ps != nil {
		ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
		ps.Unsubscribe(ctx, s.ch)
		cancel()
	}
}

// drop forgets subscription s.
func (n *notices) drop(s *noticeSub) {
	if s.gone {
		return
	}
	s.gone = true
	if n.subs[s.ch] == s {
		delete(n.subs, s.ch)
	}
	if n.names[s.name]--; n.names[s.name] <= 0 {
		delete(n.names, s.name)
	}
}

// subscribe sends SUBSCRIBE for s, making the pub/sub connection and its
// reader on first use. If the SUBSCRIBE fails, s is dropped, so that the
// next waiter subscribes again; its waiters rely on their time bounds.
func (n *notices) subscribe(s *noticeSub) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.mu.Lock()
	if n.closed || s.gone {
		n.mu.Unlock()
		return
	}
	if n.ps == nil {
		n.ps = n.b.nodes[n.i].Subscribe(context.Background())
		n.wg.Add(1)
		go n.read(n.ps)
	}
	ps := n.ps
	n.pending[s.ch]++
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	err := ps.Subscribe(ctx, s.ch)
	cancel()
	if err == nil {
		return
	}
	n.mu.Lock()
	if n.pending[s.ch] > 0 {
		n.pending[s.ch]--
	}
	n.drop(s)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		n.idle--
	}
	n.mu.Unlock()
}

// read receives the notices until the Backend is closed.
func (n *notices) read(ps *goredis.PubSub) {
	defer n.wg.Done()
	fails := 0
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			select {
			case <-n.closing:
				return
			default:
			}
			// The connection was lost; go-redis connects and subscribes
			// again at the next Receive. Notices in between are lost, so
			// every waiter tries again.
			n.reset()
			fails++
			select {
			case <-time.After(min(time.Duration(fails)*50*time.Millisecond, time.Second)):
			case <-n.closing:
				return
			}
			continue
		}
		fails = 0
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		case *goredis.Message:
			n.b.received.Add(1)
			n.dispatch(m.Channel, m.Payload)
		}
	}
}

// dispatch passes a notice on lock channel ch to the waiter it names, or
// to all waiters of the lock if it names none.
func (n *notices) dispatch(ch, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[ch]
	if s == nil {
		return
	}
	for _, w := range s.waiters {
		if payload == "" || payload == w.qid {
			w.notice(n.i)
		}
	}
}

// confirm records the master's confirmation of a SUBSCRIBE; only that of
// the last one sent confirms the subscription.
func (n *notices) confirm(ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.pending[ch]; p > 1 {
		n.pending[ch] = p - 1
		return
	}
	delete(n.pending, ch)
	if s := n.subs[ch]; s != nil {
		s.confirmed = true
	}
}

// reset marks every subscription unconfirmed after the connection was
// lost, and passes a notice to every waiter: notices may have been lost.
func (n *notices) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.pending)
	for _, s := range n.subs {
		s.confirmed = false
		for _, w := range s.waiters {
			w.notice(n.i)
		}
	}
}

// close ends the pub/sub connection and waits for its reader.
func (n *notices) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.closing)
	for _, s := range n.subs {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	}
	n.mu.Unlock()
	n.wmu.Lock()
	n.mu.Lock()
	ps := n.ps
	n.mu.Unlock()
	if ps != nil {
		ps.Close()
	}
	n.wmu.Unlock()
	n.wg.Wait()
}
