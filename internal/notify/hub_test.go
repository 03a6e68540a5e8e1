package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeConn is a pub/sub connection in memory: SUBSCRIBE and PING are
// answered at once unless the connection is silent, and a SUBSCRIBE to
// failOn fails.
type fakeConn struct {
	events chan Event
	done   chan struct{}
	once   sync.Once

	mu           sync.Mutex
	silent       bool
	failOn       string
	subscribed   []string
	unsubscribed []string
}

func (c *fakeConn) send(ev Event) {
	select {
	case c.events <- ev:
	case <-c.done:
	}
}

func (c *fakeConn) Subscribe(_ context.Context, channels ...string) error {
	c.mu.Lock()
	c.subscribed = append(c.subscribed, channels...)
	silent, fail := c.silent, slices.Contains(channels, c.failOn)
	c.mu.Unlock()
	if fail {
		return errors.New("fake: write failed")
	}
	if !silent {
		for _, ch := range channels {
			c.send(Event{Kind: Subscribed, Channel: ch})
		}
	}
	return nil
}

func (c *fakeConn) Unsubscribe(_ context.Context, channels ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsubscribed = append(c.unsubscribed, channels...)
	return nil
}

func (c *fakeConn) Ping(context.Context) error {
	c.mu.Lock()
	silent := c.silent
	c.mu.Unlock()
	if !silent {
		c.send(Event{Kind: Other})
	}
	return nil
}

func (c *fakeConn) Receive(_ context.Context, timeout time.Duration) (Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ev := <-c.events:
		return ev, nil
	case <-c.done:
		return Event{}, errors.New("fake: connection closed")
	case <-t.C:
		return Event{}, fmt.Errorf("fake: read: %w", ErrQuiet)
	}
}

func (c *fakeConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

func (c *fakeConn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *fakeConn) setSilent() {
	c.mu.Lock()
	c.silent = true
	c.mu.Unlock()
}

func (c *fakeConn) writes() (sub, unsub []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.subscribed), slices.Clone(c.unsubscribed)
}

// dialer makes fakeConns; setup, if set, prepares the n-th (from 0).
type dialer struct {
	mu    sync.Mutex
	conns []*fakeConn
	setup func(n int, c *fakeConn)
}

func (d *dialer) dial() Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &fakeConn{events: make(chan Event, 64), done: make(chan struct{})}
	if d.setup != nil {
		d.setup(len(d.conns), c)
	}
	d.conns = append(d.conns, c)
	return c
}

func (d *dialer) conn(n int) *fakeConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n < len(d.conns) {
		return d.conns[n]
	}
	return nil
}

func (d *dialer) dialed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// waiter is a test's waiter; recorder is the policy that counts what
// reaches each.
type waiter struct{ name string }

type recorder struct {
	mu      sync.Mutex
	notices map[*waiter][]string
	retries map[*waiter]int
}

func (r *recorder) Notice(ch, payload string, waiters []*waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range waiters {
		r.notices[w] = append(r.notices[w], ch+"="+payload)
	}
}

func (r *recorder) Retry(w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries[w]++
}

func (r *recorder) got(w *waiter) ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notices[w]), r.retries[w]
}

func newHub(t *testing.T, d *dialer) (*Hub[*waiter], *recorder) {
	t.Helper()
	r := &recorder{notices: map[*waiter][]string{}, retries: map[*waiter]int{}}
	h := New(d.dial, Policy[*waiter](r))
	h.pingEvery, h.pingTimeout = 20*time.Millisecond, 40*time.Millisecond
	t.Cleanup(h.Close)
	return h, r
}

// eventually fails the test if cond is not true within 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: not %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNoticeReachesTheChannelsWaiters(t *testing.T) {
	d := &dialer{}
	h, r := newHub(t, d)
	a1, a2, b := &waiter{"a1"}, &waiter{"a2"}, &waiter{"b"}
	if attached, _ := h.TryAttach(a1, "a"); attached {
		t.Fatal("TryAttach attached to a channel without a subscription")
	}
	h.Attach(a1, "a", "lock-a")
	h.Attach(b, "b", "")
	eventually(t, "a and b confirmed", func() bool { return h.Confirmed("a") && h.Confirmed("b") })
	if attached, confirmed := h.TryAttach(a2, "a"); !attached || !confirmed {
		t.Fatalf("TryAttach on a confirmed subscription = %v, %v; want true, true", attached, confirmed)
	}
	if !h.Grouped("lock-a") || h.Grouped("") {
		t.Error("Grouped: want lock-a only")
	}
	d.conn(0).send(Event{Kind: Message, Channel: "a", Payload: "x"})
	eventually(t, "a1 and a2 got a=x", func() bool {
		n1, _ := r.got(a1)
		n2, _ := r.got(a2)
		return len(n1) == 1 && len(n2) == 1
	})
	if n, _ := r.got(b); len(n) != 0 {
		t.Errorf("b got %v, want nothing", n)
	}
	if d.dialed() != 1 {
		t.Errorf("%d connections for two channels, want 1", d.dialed())
	}
	select {
	case <-h.Ready("a"):
	default:
		t.Error("Ready(a) is not closed after the confirmation")
	}
}

func TestLingerThenUnsubscribe(t *testing.T) {
	d := &dialer{}
	h, _ := newHub(t, d)
	h.linger = 50 * time.Millisecond
	w := &waiter{"w"}
	h.Attach(w, "a", "g")
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
	h.Detach(w, "a")
	if !h.Subscribed("a") {
		t.Fatal("the subscription was dropped at once; want it to linger")
	}
	// A waiter that comes while it lingers keeps it.
	if attached, confirmed := h.TryAttach(w, "a"); !attached || !confirmed {
		t.Fatalf("TryAttach on a lingering subscription = %v, %v", attached, confirmed)
	}
	time.Sleep(100 * time.Millisecond)
	if !h.Subscribed("a") {
		t.Fatal("the subscription was dropped with a waiter")
	}
	h.Detach(w, "a")
	eventually(t, "a dropped", func() bool { return !h.Subscribed("a") && !h.Grouped("g") })
	eventually(t, "UNSUBSCRIBE a sent", func() bool {
		_, unsub := d.conn(0).writes()
		return slices.Equal(unsub, []string{"a"})
	})
}

// TestFailedSubscribe: a SUBSCRIBE that fails counts as a lost connection.
// The subscription and its waiters stay; every waiter is told to look at
// once; a new connection subscribes every channel again, and the waiters
// are told to look again when it confirms.
func TestFailedSubscribe(t *testing.T) {
	d := &dialer{setup: func(n int, c *fakeConn) {
		if n == 0 {
			c.failOn = "b"
		}
	}}
	h, r := newHub(t, d)
	a, b := &waiter{"a"}, &waiter{"b"}
	h.Attach(a, "a", "")
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
	h.Attach(b, "b", "")
	if !h.Subscribed("b") {
		t.Fatal("the subscription whose SUBSCRIBE failed was dropped")
	}
	eventually(t, "a second connection", func() bool { return d.dialed() == 2 })
	if !d.conn(0).isClosed() {
		t.Error("the connection whose SUBSCRIBE failed is still open")
	}
	eventually(t, "a and b confirmed on the new connection", func() bool { return h.Confirmed("a") && h.Confirmed("b") })
	sub, _ := d.conn(1).writes()
	slices.Sort(sub)
	if !slices.Equal(sub, []string{"a", "b"}) {
		t.Errorf("the new connection subscribed %v, want [a b]", sub)
	}
	for _, w := range []*waiter{a, b} {
		if _, n := r.got(w); n != 2 {
			t.Errorf("waiter %s told to look %d times, want 2 (at the loss, at the confirmation)", w.name, n)
		}
	}
	d.conn(1).send(Event{Kind: Message, Channel: "b", Payload: "y"})
	eventually(t, "b got b=y", func() bool { n, _ := r.got(b); return len(n) == 1 })
}

// TestSilentConnection: a connection that stops answering (no error, no
// reply to PING) is replaced within pingEvery + pingTimeout.
func TestSilentConnection(t *testing.T) {
	d := &dialer{}
	h, r := newHub(t, d)
	w := &waiter{"w"}
	h.Attach(w, "a", "")
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
	time.Sleep(100 * time.Millisecond) // PINGs answered: the connection stays
	if n := d.dialed(); n != 1 {
		t.Fatalf("%d connections while PINGs were answered, want 1", n)
	}
	d.conn(0).setSilent()
	start := time.Now()
	eventually(t, "a new connection", func() bool { return d.dialed() == 2 })
	if el, limit := time.Since(start), h.pingEvery+h.pingTimeout+time.Second; el > limit {
		t.Errorf("the silent connection was replaced after %v, want within %v", el, limit)
	}
	if !d.conn(0).isClosed() {
		t.Error("the silent connection is still open")
	}
	eventually(t, "a confirmed again", func() bool { return h.Confirmed("a") })
	if _, n := r.got(w); n != 2 {
		t.Errorf("the waiter was told to look %d times, want 2 (at the loss, at the confirmation)", n)
	}
}

// TestLostConnection: an error from Receive unconfirms every subscription
// until the next connection confirms it.
func TestLostConnection(t *testing.T) {
	d := &dialer{setup: func(n int, c *fakeConn) {
		if n == 1 {
			c.silent = true // the first reconnection does not confirm
		}
	}}
	h, r := newHub(t, d)
	w := &waiter{"w"}
	h.Attach(w, "a", "")
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
	ready := h.Ready("a")
	d.conn(0).Close()
	eventually(t, "told to look", func() bool { _, n := r.got(w); return n == 1 })
	if h.Confirmed("a") {
		t.Error("Confirmed after the loss, before a new confirmation")
	}
	if h.Ready("a") == ready {
		t.Error("Ready returns the channel closed before the loss")
	}
	eventually(t, "a confirmed on the third connection", func() bool { return h.Confirmed("a") })
	if n := d.dialed(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// TestOnlyTheLastSubscribeConfirms: while two SUBSCRIBEs to one channel
// are in flight, the first reply does not confirm.
func TestOnlyTheLastSubscribeConfirms(t *testing.T) {
	d := &dialer{setup: func(n int, c *fakeConn) { c.silent = true }}
	h, _ := newHub(t, d)
	h.pingTimeout = time.Hour // the silent connection stays
	h.pingEvery = time.Hour
	h.linger = 0
	w := &waiter{"w"}
	h.Attach(w, "a", "")
	eventually(t, "SUBSCRIBE a sent", func() bool {
		c := d.conn(0)
		if c == nil {
			return false
		}
		sub, _ := c.writes()
		return len(sub) == 1
	})
	h.Detach(w, "a")
	eventually(t, "a dropped", func() bool { return !h.Subscribed("a") })
	h.Attach(w, "a", "")
	eventually(t, "SUBSCRIBE a sent again", func() bool { sub, _ := d.conn(0).writes(); return len(sub) == 2 })
	c := d.conn(0)
	c.send(Event{Kind: Subscribed, Channel: "a"})
	time.Sleep(20 * time.Millisecond)
	if h.Confirmed("a") {
		t.Fatal("the reply to the first SUBSCRIBE confirmed the second")
	}
	c.send(Event{Kind: Subscribed, Channel: "a"})
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
}

func TestDeliver(t *testing.T) {
	d := &dialer{}
	h, r := newHub(t, d)
	w := &waiter{"w"}
	h.Deliver("a", "x") // no subscription: nobody
	h.Attach(w, "a", "")
	h.Deliver("a", "x")
	if n, _ := r.got(w); !slices.Equal(n, []string{"a=x"}) {
		t.Errorf("got %v, want [a=x]", n)
	}
}

func TestClose(t *testing.T) {
	d := &dialer{}
	h, _ := newHub(t, d)
	w := &waiter{"w"}
	h.Attach(w, "a", "g")
	eventually(t, "a confirmed", func() bool { return h.Confirmed("a") })
	h.Detach(w, "a") // lingering: Close stops its timer
	h.Close()
	select {
	case <-h.Closing():
	default:
		t.Error("Closing is open after Close")
	}
	if !d.conn(0).isClosed() {
		t.Error("the connection is open after Close")
	}
	if h.Attach(w, "b", "") {
		t.Error("Attach after Close attached")
	}
	if h.Confirmed("a") || h.Subscribed("a") {
		t.Error("a subscription is confirmed after Close")
	}
	h.Close() // twice is fine
}
