package redlock

import (
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/redisconn"
)

// notices receives the release notices of one master for all the waiters
// of a Backend, on one pub/sub connection made with the first waiter (see
// [notify.Hub]). Each lock with waiters here has two subscriptions: to the
// lock's channel, where a release or cancel that finds only waiters whose
// deadline passed sends an empty notice for every waiter (a release with
// no queue sends none: a waiter that saw the lock held there joined a
// queue), and to the lock's channel for this Backend, where a release
// sends a notice that names the waiter that should try (the head of the
// fair queue, or of the queue of waiters that are not fair) when that
// waiter is one of this Backend's: only that waiter hears of it, and
// other processes get nothing. When the last waiter of a lock leaves, its
// subscriptions linger for a while and are then dropped. So a waiter costs
// no connection, and usually no SUBSCRIBE either. A lost connection counts
// as a notice to every waiter.
type notices struct {
	hub    *notify.Hub[*waiter]
	client redisconn.Subscriber // makes the hub's connections: the master's client, but in tests
}

func (b *Backend) startNotices() {
	b.notices = make([]notices, len(b.nodes))
	for i := range b.notices {
		n := &b.notices[i]
		n.client = b.nodes[i]
		n.hub = notify.New(func() notify.Conn { return redisconn.PubSub(n.client) }, noticePolicy{b, i})
	}
}

// noticePolicy passes a notice from master i to the waiter it names, or to
// all waiters of the lock if it names none.
type noticePolicy struct {
	b *Backend
	i int
}

func (p noticePolicy) Notice(_, payload string, waiters []*waiter) {
	p.b.received.Add(1)
	for _, w := range waiters {
		if payload == "" || payload == w.qid {
			w.notice(p.i, payload != "")
		}
	}
}

func (p noticePolicy) Retry(w *waiter) { w.notice(p.i, false) }

// attach makes w hear the notices on channel ch (one of its lock's) from
// this master, subscribing unless a subscription is there.
func (n *notices) attach(w *waiter, ch string) { n.hub.Attach(w, ch, w.req.Name) }

// tryAttach attaches w if channel ch has a subscription here, and reports
// whether the master confirmed it: then every notice the master sends on
// ch from now on reaches w.
func (n *notices) tryAttach(w *waiter, ch string) (attached, confirmed bool) {
	return n.hub.TryAttach(w, ch)
}

// waitedOn reports whether this Backend's waiters subscribed to the
// channels of lock name here (they may have left since), without
// allocating.
func (n *notices) waitedOn(name string) bool { return n.hub.Grouped(name) }

// confirmed reports whether channel ch has a confirmed subscription here.
func (n *notices) confirmed(ch string) bool { return n.hub.Confirmed(ch) }

// ready returns a channel closed once channel ch has a subscription
// confirmed here, or nil if it has none.
func (n *notices) ready(ch string) <-chan struct{} { return n.hub.Ready(ch) }

// detach stops the notices on ch to w; a subscription left without
// waiters lingers.
func (n *notices) detach(w *waiter, ch string) { n.hub.Detach(w, ch) }

// close ends the pub/sub connection and waits for its reader.
func (n *notices) close() { n.hub.Close() }
