package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/redisconn"
)

// mux shares one pub/sub connection among all the waiters of a Backend
// (see [notify.Hub]): each lock with waiters in this process has one
// channel subscription, which lingers for a while after its last waiter
// leaves.
//
// A release publishes the queue's head id (fair queue) or "" on the lock's
// channel. An id wakes that waiter only; "" wakes one local waiter of the
// lock, the longest-waiting one that has not been woken yet. A lost
// connection wakes them all.
//
// A waiter attempts only while its subscription is confirmed by the server
// ("armed"): a release processed after the attempt is then sure to be
// delivered. An attempt made before the confirmation is followed, once the
// confirmation arrives, by another one.
type mux struct {
	hub    *notify.Hub[*waiter]
	client redisconn.Subscriber // makes the hub's connections: the Backend's client, but in tests
}

func newMux(b *Backend) *mux {
	m := &mux{client: b.rdb}
	m.hub = notify.New(func() notify.Conn { return redisconn.PubSub(m.client) }, wakePolicy{})
	return m
}

// wakePolicy is whom a notice wakes: the waiter it names, or, if it names
// none, the longest-waiting waiter without a wake-up pending.
type wakePolicy struct{}

func (wakePolicy) Notice(_, payload string, waiters []*waiter) {
	for _, w := range waiters {
		if payload == "" {
			if w.signal() {
				return
			}
		} else if w.rid == payload {
			w.signal()
			return
		}
	}
}

func (wakePolicy) Retry(w *waiter) { w.signal() }

// tryAttach adds w to the subscription of its lock if there is one, and
// reports whether it is confirmed.
func (m *mux) tryAttach(w *waiter) bool {
	if !m.hub.Subscribed(w.ch) {
		return false
	}
	w.makeWake()
	attached, confirmed := m.hub.TryAttach(w, w.ch)
	w.attached = attached
	return confirmed
}

// attach adds w to the subscription of its lock, subscribing if needed.
func (m *mux) attach(w *waiter) {
	w.makeWake()
	w.attached = m.hub.Attach(w, w.ch, "")
}

// detach removes w from its subscription. A wake-up w received and did not
// act on goes to another waiter, unless w was granted.
func (m *mux) detach(w *waiter, granted bool) {
	if !w.attached {
		return
	}
	w.attached = false
	m.hub.Detach(w, w.ch)
	if !granted {
		select {
		case <-w.wake:
			m.hub.Deliver(w.ch, "")
		default:
		}
	}
}

// armed reports whether w's subscription is confirmed.
func (m *mux) armed(w *waiter) bool {
	return w.attached && m.hub.Confirmed(w.ch)
}

// readyOf returns a channel closed when w's subscription is confirmed (nil
// if w has none).
func (m *mux) readyOf(w *waiter) <-chan struct{} {
	if !w.attached {
		return nil
	}
	return m.hub.Ready(w.ch)
}

// close ends the pub/sub connection and waits for the mux's goroutines.
func (m *mux) close() { m.hub.Close() }

// waiter is a waiting acquisition: a [dlock.Waiter].
type waiter struct {
	b    *Backend
	k    *keys
	req  dlock.Request
	rid  string // request id: the queue entry and the grant's mark
	ch   string // the lock's channel, for a waiting request
	mode string
	wake chan struct{} // a notice for this waiter; capacity 1; made when it joins a subscription or its peers' fair set

	handoff *handoff // a grant a release handed to it; guarded by b.peers.fair.mu

	// Used by the Client's goroutine only.
	attached  bool          // to its lock's subscription
	armed     bool          // the last attempt was made with a confirmed subscription
	hint      time.Duration // how long the last attempt says to wait at most; <0 unknown
	uncertain bool          // the last attempt failed without a known outcome
	done      bool
	sent      bool           // args was used: a later attempt allocates its own
	args      [3 + 4 + 5]any // the first attempt's arguments (see attempt)
}

func (w *waiter) makeWake() {
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
}

// signal delivers a wake-up unless one is pending; it reports whether it
// delivered one.
func (w *waiter) signal() bool {
	select {
	case w.wake <- struct{}{}:
		return true
	default:
		return false
	}
}

// bound is the longest the next Wait may block: the holder's remaining
// lease (expiry publishes nothing), the time until a fair queue's head
// counts as dead, and, for a fair waiter, a third of its timeout, to show
// it is alive.
func (w *waiter) bound() time.Duration {
	d := w.hint
	if d < 0 || w.mode == modeFair {
		keep := w.b.cfg.waiterTimeout / 3
		if d < 0 || keep < d {
			d = keep
		}
	}
	return d
}

// Wait blocks until a release notice for this waiter, the end of the
// holder's lease as the last attempt saw it, or ctx is done. If the last
// attempt was made before the subscription was confirmed, it returns as
// soon as it is, for an attempt that cannot miss a release.
func (w *waiter) Wait(ctx context.Context) error {
	d := w.bound()
	if d <= 0 {
		return ctx.Err()
	}
	var ready <-chan struct{}
	if !w.armed {
		ready = w.b.mux.readyOf(w)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.wake:
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.b.mux.hub.Closing():
		return fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
	}
	return nil
}

// Acquire makes the waiter's next attempt.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.done {
		return dlock.Grant{}, fmt.Errorf("%w: waiter already ended", dlock.ErrInvalidOption)
	}
	if h := w.b.peers.fair.takeHandoff(w); h != nil {
		// A release in this process handed the lock over: the grant is
		// made, by this waiter's request id.
		w.done = true
		w.b.mux.detach(w, true)
		w.b.peers.fair.remove(w)
		return dlock.Grant{Token: h.token, Count: 1, Handle: w.k, Age: time.Since(h.sent)}, nil
	}
	if err := w.b.ready(ctx); err != nil {
		return dlock.Grant{}, err
	}
	w.armed = w.b.mux.armed(w)
	// A notice that came before this attempt is answered by it.
	select {
	case <-w.wake:
	default:
	}
	g, err := w.b.attempt(ctx, w)
	if err == nil {
		w.done = true
		w.b.mux.detach(w, true)
		w.b.peers.fair.remove(w)
	}
	return g, err
}

// Cancel withdraws the waiter: it leaves the lock's queue (fair), and
// gives back a grant that an attempt whose reply was lost may have made.
func (w *waiter) Cancel(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.b.mux.detach(w, false)
	w.b.peers.fair.remove(w)
	if w.mode != modeFair && !w.uncertain {
		return nil
	}
	return w.cancelOnServer(ctx)
}

func (w *waiter) cancelOnServer(ctx context.Context) error {
	k := w.k
	_, _, err := w.b.run(ctx, cancelScript, k.all[:], w.rid, w.req.Owner)
	if err != nil {
		return w.b.fail(k, err)
	}
	return nil
}
