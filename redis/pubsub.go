package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// mux shares one pub/sub connection among all the waiters of a Backend.
// Each lock with waiters in this process has one channel subscription,
// counted by reference; when its last waiter leaves, the subscription
// lingers for a while (a lock waited on once is likely to be waited on
// again) and is then dropped.
//
// A release publishes the queue's head id (fair queue) or "" on the lock's
// channel. An id wakes that waiter only; "" wakes one local waiter of the
// lock, the longest-waiting one that has not been woken yet.
//
// A waiter attempts only while its subscription is confirmed by the server
// ("armed"): a release processed after the attempt is then sure to be
// delivered. An attempt made before the confirmation is followed, once the
// confirmation arrives, by another one.
type mux struct {
	b *Backend

	mu      sync.Mutex
	subs    map[string]*sub    // by channel
	byID    map[string]*waiter // by request id
	pending map[string]int     // SUBSCRIBEs sent and not yet confirmed, by channel
	idle    int                // subscriptions without waiters, lingering
	closed  bool
	closing chan struct{}
	ps      *goredis.PubSub // created with the first subscription

	wmu sync.Mutex // orders SUBSCRIBE and UNSUBSCRIBE writes
	wg  sync.WaitGroup
}

// sub is the subscription to one lock's channel.
type sub struct {
	ch         string
	refs       int
	waiters    []*waiter // in arrival order
	confirmed  bool
	ready      chan struct{} // closed when confirmed
	afterReset bool          // the connection was lost since the last confirmation
	timer      *time.Timer   // set while lingering without waiters
	gone       bool          // no longer in subs
}

const (
	// lingerTime is how long a subscription without waiters is kept.
	lingerTime = 10 * time.Second
	// maxIdle bounds the subscriptions without waiters kept lingering.
	maxIdle = 1024
	// subscribeTimeout bounds the write of a SUBSCRIBE or UNSUBSCRIBE.
	subscribeTimeout = 5 * time.Second
)

func newMux(b *Backend) *mux {
	return &mux{
		b:       b,
		subs:    make(map[string]*sub),
		byID:    make(map[string]*waiter),
		pending: make(map[string]int),
		closing: make(chan struct{}),
	}
}

// tryAttach adds w to the subscription of its lock if there is one, and
// reports whether it is confirmed.
func (m *mux) tryAttach(w *waiter) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.subs[w.k.channel]
	if m.closed || s == nil {
		return false
	}
	m.addLocked(s, w)
	return s.confirmed
}

// attach adds w to the subscription of its lock, subscribing if needed.
func (m *mux) attach(w *waiter) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	s := m.subs[w.k.channel]
	created := s == nil
	if created {
		s = &sub{ch: w.k.channel, ready: make(chan struct{})}
		m.subs[s.ch] = s
	}
	m.addLocked(s, w)
	m.mu.Unlock()
	if created {
		m.subscribe(s)
	}
}

func (m *mux) addLocked(s *sub, w *waiter) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		m.idle--
	}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	s.refs++
	s.waiters = append(s.waiters, w)
	m.byID[w.rid] = w
	w.sub = s
}

// detach removes w from its subscription. A wake-up w received and did not
// act on goes to another waiter, unless w was granted.
func (m *mux) detach(w *waiter, granted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := w.sub
	if s == nil {
		return
	}
	w.sub = nil
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
	}
	delete(m.byID, w.rid)
	s.refs--
	if !granted {
		select {
		case <-w.wake:
			m.wakeOneLocked(s)
		default:
		}
	}
	if s.refs > 0 || s.gone || m.closed {
		return
	}
	linger := lingerTime
	if m.idle >= maxIdle {
		linger = 0
	}
	m.idle++
	s.timer = time.AfterFunc(linger, func() { m.expire(s) })
}

// expire drops a subscription that lingered without waiters.
func (m *mux) expire(s *sub) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	if m.closed || s.timer == nil || s.refs > 0 {
		m.mu.Unlock()
		return
	}
	s.timer = nil
	m.idle--
	s.gone = true
	if m.subs[s.ch] == s {
		delete(m.subs, s.ch)
	}
	ps := m.ps
	m.mu.Unlock()
	if ps != nil {
		ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
		ps.Unsubscribe(ctx, s.ch)
		cancel()
	}
}

// subscribe sends SUBSCRIBE for s, creating the pub/sub connection and its
// reader on first use.
func (m *mux) subscribe(s *sub) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	if m.closed || s.gone {
		m.mu.Unlock()
		return
	}
	if m.ps == nil {
		m.ps = m.b.rdb.Subscribe(context.Background())
		m.wg.Add(1)
		go m.read(m.ps)
	}
	ps := m.ps
	m.pending[s.ch]++
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	err := ps.Subscribe(ctx, s.ch)
	cancel()
	if err == nil {
		return
	}
	// The SUBSCRIBE may not have reached the server. Forget s, so that the
	// next waiter subscribes anew; its waiters fall back on their time
	// bounds.
	m.mu.Lock()
	if m.pending[s.ch] > 0 {
		m.pending[s.ch]--
	}
	s.gone = true
	if m.subs[s.ch] == s {
		delete(m.subs, s.ch)
	}
	m.mu.Unlock()
}

// read receives from the pub/sub connection until the mux is closed.
func (m *mux) read(ps *goredis.PubSub) {
	defer m.wg.Done()
	fails := 0
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			if m.isClosed() {
				return
			}
			// The connection was lost; go-redis reconnects and subscribes
			// again. Messages in between are lost: waiters retry when
			// their subscriptions are confirmed again.
			m.reset()
			fails++
			select {
			case <-time.After(min(time.Duration(fails)*50*time.Millisecond, time.Second)):
			case <-m.closing:
				return
			}
			continue
		}
		fails = 0
		switch v := msg.(type) {
		case *goredis.Subscription:
			if v.Kind == "subscribe" {
				m.confirm(v.Channel)
			}
		case *goredis.Message:
			m.dispatch(v.Channel, v.Payload)
		}
	}
}

func (m *mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// reset marks every subscription unconfirmed after the connection was
// lost.
func (m *mux) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.subs {
		if s.confirmed {
			s.confirmed = false
			s.ready = make(chan struct{})
		}
		s.afterReset = true
	}
	clear(m.pending)
}

// confirm records the server's confirmation of a SUBSCRIBE.
func (m *mux) confirm(ch string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.pending[ch]; n > 1 {
		m.pending[ch] = n - 1
		return
	}
	delete(m.pending, ch)
	s := m.subs[ch]
	if s == nil || s.confirmed {
		return
	}
	s.confirmed = true
	close(s.ready)
	if s.afterReset {
		// Releases may have gone unnoticed while the connection was down.
		s.afterReset = false
		for _, w := range s.waiters {
			w.signal()
		}
	}
}

// dispatch handles a notice on a lock's channel.
func (m *mux) dispatch(ch, payload string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.subs[ch]
	if s == nil {
		return
	}
	if payload != "" {
		if w := m.byID[payload]; w != nil && w.sub == s {
			w.signal()
		}
		return
	}
	m.wakeOneLocked(s)
}

// wakeOneLocked wakes the longest-waiting waiter of s that has no wake-up
// pending.
func (m *mux) wakeOneLocked(s *sub) {
	for _, w := range s.waiters {
		if w.signal() {
			return
		}
	}
}

// armed reports whether w's subscription is confirmed.
func (m *mux) armed(w *waiter) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return w.sub != nil && w.sub.confirmed && !w.sub.gone
}

// readyOf returns a channel closed when w's subscription is confirmed (nil
// if w has none).
func (m *mux) readyOf(w *waiter) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.sub == nil || w.sub.gone {
		return nil
	}
	return w.sub.ready
}

// close ends the pub/sub connection and waits for the mux's goroutines.
func (m *mux) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.closing)
	for _, s := range m.subs {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	}
	m.mu.Unlock()
	m.wmu.Lock()
	m.mu.Lock()
	ps := m.ps
	m.mu.Unlock()
	if ps != nil {
		ps.Close()
	}
	m.wmu.Unlock()
	m.wg.Wait()
}

// waiter is a waiting acquisition: a [dlock.Waiter].
type waiter struct {
	b    *Backend
	k    *keys
	req  dlock.Request
	rid  string // request id: the queue entry and the grant's mark
	mode string
	wake chan struct{} // a notice for this waiter; capacity 1; made when it joins a subscription or fairWaiters

	sub     *sub     // guarded by b.mux.mu
	handoff *handoff // a grant a release handed to it; guarded by fairWaiters.mu

	// Used by the Client's goroutine only.
	armed     bool          // the last attempt was made with a confirmed subscription
	hint      time.Duration // how long the last attempt says to wait at most; <0 unknown
	uncertain bool          // the last attempt failed without a known outcome
	done      bool
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
	case <-w.b.mux.closing:
		return fmt.Errorf("%w: the redis backend is closed", dlock.ErrClosed)
	}
	return nil
}

// Acquire makes the waiter's next attempt.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	if w.done {
		return dlock.Grant{}, fmt.Errorf("%w: waiter already ended", dlock.ErrInvalidOption)
	}
	if h := fairWaiters.takeHandoff(w); h != nil {
		// A release in this process handed the lock over: the grant is
		// made, by this waiter's request id.
		w.done = true
		w.b.mux.detach(w, true)
		fairWaiters.remove(w)
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
		fairWaiters.remove(w)
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
	fairWaiters.remove(w)
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
