package notify

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Conn is one pub/sub connection: what go-redis's *PubSub offers. One
// goroutine calls Receive while others call the rest.
type Conn interface {
	// Subscribe sends SUBSCRIBE; the server's confirmations come through
	// Receive.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe sends UNSUBSCRIBE.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Ping sends PING; its reply comes through Receive.
	Ping(ctx context.Context) error
	// Receive returns the next event. If none comes within timeout it
	// returns an error matching [ErrQuiet], and the connection stays
	// usable; any other error means the connection is lost.
	Receive(ctx context.Context, timeout time.Duration) (Event, error)
	// Close closes the connection; a blocked Receive returns.
	Close() error
}

// ErrQuiet is what [Conn.Receive] returns when nothing came in time.
var ErrQuiet = errors.New("notify: nothing received in time")

// Kind is what an [Event] is.
type Kind int

const (
	// Other is a reply the hub does not act on: a PONG, an UNSUBSCRIBE's.
	Other Kind = iota
	// Subscribed is the server's confirmation of a SUBSCRIBE to Channel.
	Subscribed
	// Message is a Payload published on Channel.
	Message
)

// Event is what a [Conn] receives.
type Event struct {
	Kind             Kind
	Channel, Payload string
}

// Policy is a backend's part of a [Hub]: what a notice means and whom it
// wakes. The hub calls it with its lock held: it must neither block nor
// call the hub.
type Policy[W any] interface {
	// Notice handles payload, published on channel ch (or passed on with
	// [Hub.Deliver]); waiters are the channel's, in the order they came.
	Notice(ch, payload string, waiters []W)
	// Retry tells w that notices may have been lost (the connection was
	// lost, or its subscription was confirmed again after a loss): it
	// should look for itself.
	Retry(w W)
}

const (
	// lingerTime is how long a subscription without waiters is kept.
	lingerTime = 10 * time.Second
	// maxIdle bounds the subscriptions without waiters kept lingering.
	maxIdle = 1024
	// writeTimeout bounds the write of a SUBSCRIBE, UNSUBSCRIBE or PING.
	writeTimeout = 5 * time.Second
	// pingEvery is how long the connection may be quiet before a PING.
	pingEvery = 2 * time.Second
	// pingTimeout is how long the PING's reply (or anything) may take
	// before the connection counts as lost.
	pingTimeout = 3 * time.Second
)

// Hub shares one pub/sub connection among the waiters (W) of many
// channels. It dials the connection with the first subscription and
// replaces it after a loss; see the package documentation.
type Hub[W comparable] struct {
	dial   func() Conn
	policy Policy[W]
	// The timings, constants but for the tests.
	linger, pingEvery, pingTimeout time.Duration

	mu      sync.Mutex
	subs    map[string]*sub[W] // by channel
	groups  map[string]int     // subscriptions by group
	pending map[string]int     // SUBSCRIBEs sent and not yet confirmed, by channel
	idle    int                // subscriptions without waiters, lingering
	conn    Conn               // nil before the first subscription and between connections
	started bool               // the reader runs
	closed  bool
	closing chan struct{}

	wmu sync.Mutex     // orders SUBSCRIBE and UNSUBSCRIBE writes
	wg  sync.WaitGroup // the reader
}

// sub is the subscription to one channel.
type sub[W comparable] struct {
	ch, group string
	waiters   []W  // in arrival order
	confirmed bool // the server confirmed the SUBSCRIBE on this connection
	afterLoss bool // the connection was lost since the last confirmation
	ready     chan struct{}
	timer     *time.Timer // set while lingering without waiters
	gone      bool        // no longer in subs
}

// New returns a Hub that dials its connections with dial (which need not
// do any I/O: the first call on the Conn may connect) and leaves to policy
// whom a notice wakes.
func New[W comparable](dial func() Conn, policy Policy[W]) *Hub[W] {
	return &Hub[W]{
		dial: dial, policy: policy,
		linger: lingerTime, pingEvery: pingEvery, pingTimeout: pingTimeout,
		subs:    make(map[string]*sub[W]),
		groups:  make(map[string]int),
		pending: make(map[string]int),
		closing: make(chan struct{}),
	}
}

// Attach makes w hear the notices on channel ch, subscribing if ch has no
// subscription. group, unless empty, names a set of channels (a lock's)
// that [Hub.Grouped] asks about. It reports false once the hub is closed.
func (h *Hub[W]) Attach(w W, ch, group string) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	s := h.subs[ch]
	created := s == nil
	if created {
		s = &sub[W]{ch: ch, group: group, ready: make(chan struct{})}
		h.subs[ch] = s
		if group != "" {
			h.groups[group]++
		}
	}
	h.addLocked(s, w)
	h.mu.Unlock()
	if created {
		h.subscribe(s)
	}
	return true
}

// TryAttach attaches w to channel ch if ch has a subscription, and reports
// whether it did and whether the subscription is confirmed: then every
// notice published on ch from now on reaches w (or a Retry does).
func (h *Hub[W]) TryAttach(w W, ch string) (attached, confirmed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[ch]
	if h.closed || s == nil {
		return false, false
	}
	h.addLocked(s, w)
	return true, s.confirmed
}

func (h *Hub[W]) addLocked(s *sub[W], w W) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		h.idle--
	}
	s.waiters = append(s.waiters, w)
}

// Detach stops the notices on ch to w. A subscription left without
// waiters lingers, then is dropped.
func (h *Hub[W]) Detach(w W, ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[ch]
	if s == nil {
		return
	}
	i := slices.Index(s.waiters, w)
	if i < 0 {
		return
	}
	s.waiters = slices.Delete(s.waiters, i, i+1)
	if len(s.waiters) > 0 || h.closed || s.timer != nil {
		return
	}
	linger := h.linger
	if h.idle >= maxIdle {
		linger = 0
	}
	h.idle++
	s.timer = time.AfterFunc(linger, func() { h.expire(s) })
}

// Subscribed reports whether channel ch has a subscription.
func (h *Hub[W]) Subscribed(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.subs[ch] != nil && !h.closed
}

// Confirmed reports whether channel ch has a subscription the server
// confirmed on the current connection.
func (h *Hub[W]) Confirmed(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[ch]
	return s != nil && s.confirmed && !h.closed
}

// Ready returns a channel closed when the subscription to ch is confirmed,
// or nil if ch has none.
func (h *Hub[W]) Ready(ch string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[ch]; s != nil {
		return s.ready
	}
	return nil
}

// Grouped reports whether a channel of group has a subscription (its
// waiters may have left), without building a channel's name.
func (h *Hub[W]) Grouped(group string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[group] > 0
}

// Deliver hands payload to the policy as if it had been published on ch:
// a backend passes on a notice that a leaving waiter did not act on.
func (h *Hub[W]) Deliver(ch, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[ch]; s != nil && !h.closed {
		h.policy.Notice(ch, payload, s.waiters)
	}
}

// Closing returns a channel closed when Close begins.
func (h *Hub[W]) Closing() <-chan struct{} { return h.closing }

// Close ends the connection and waits for the hub's goroutines.
func (h *Hub[W]) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.closing)
	for _, s := range h.subs {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	}
	h.mu.Unlock()
	h.wmu.Lock() // an expiry or SUBSCRIBE under way ends first
	h.mu.Lock()
	c := h.conn
	h.mu.Unlock()
	if c != nil {
		c.Close() // ends the reader's Receive
	}
	h.wmu.Unlock()
	h.wg.Wait()
}

// expire drops a subscription that lingered without waiters.
func (h *Hub[W]) expire(s *sub[W]) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.closed || s.timer == nil || len(s.waiters) > 0 || s.gone {
		h.mu.Unlock()
		return
	}
	s.timer = nil
	h.idle--
	s.gone = true
	delete(h.subs, s.ch)
	if s.group != "" {
		if h.groups[s.group]--; h.groups[s.group] <= 0 {
			delete(h.groups, s.group)
		}
	}
	c := h.conn
	h.mu.Unlock()
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		c.Unsubscribe(ctx, s.ch)
		cancel()
	}
}

// subscribe sends SUBSCRIBE for s, starting the reader (which dials and
// subscribes every channel) on first use. A SUBSCRIBE that fails counts as
// a lost connection: the reader then tells every waiter to look, dials
// again and subscribes every channel, s's too.
func (h *Hub[W]) subscribe(s *sub[W]) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.closed || s.gone {
		h.mu.Unlock()
		return
	}
	if !h.started {
		h.started = true
		h.wg.Add(1)
		go h.run()
		h.mu.Unlock()
		return
	}
	c := h.conn
	if c == nil {
		h.mu.Unlock()
		return // between connections: the next one subscribes s
	}
	h.pending[s.ch]++
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	err := c.Subscribe(ctx, s.ch)
	cancel()
	if err != nil {
		c.Close()
	}
}

// run keeps a connection and reads it until the hub is closed.
func (h *Hub[W]) run() {
	defer h.wg.Done()
	for fails := 0; ; fails++ {
		if fails > 0 {
			t := time.NewTimer(min(time.Duration(fails)*50*time.Millisecond, time.Second))
			select {
			case <-t.C:
			case <-h.closing:
				t.Stop()
				return
			}
		}
		c := h.connect()
		if c == nil {
			return
		}
		if h.receive(c) {
			fails = 0
		}
		if !h.lost(c) {
			return
		}
	}
}

// connect dials a connection and subscribes every channel on it; it
// returns nil if the hub is closed.
func (h *Hub[W]) connect() Conn {
	c := h.dial()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.Close()
		return nil
	}
	h.conn = c
	chans := make([]string, 0, len(h.subs))
	for ch := range h.subs {
		chans = append(chans, ch)
		h.pending[ch]++
	}
	h.mu.Unlock()
	if len(chans) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := c.Subscribe(ctx, chans...)
		cancel()
		if err != nil {
			c.Close() // receive fails at once
		}
	}
	return c
}

// receive reads c until it fails or stays silent past a PING, and reports
// whether anything came.
func (h *Hub[W]) receive(c Conn) (heard bool) {
	pinged := false
	for {
		wait := h.pingEvery
		if pinged {
			wait = h.pingTimeout
		}
		ev, err := c.Receive(context.Background(), wait)
		if err != nil {
			if pinged || !errors.Is(err, ErrQuiet) {
				return heard
			}
			pinged = true
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			err = c.Ping(ctx)
			cancel()
			if err != nil {
				return heard
			}
			continue
		}
		heard, pinged = true, false
		switch ev.Kind {
		case Subscribed:
			h.confirm(ev.Channel)
		case Message:
			h.Deliver(ev.Channel, ev.Payload)
		}
	}
}

// lost closes c, marks every subscription unconfirmed and tells every
// waiter to look: notices may have been lost. It reports false if the hub
// is closed.
func (h *Hub[W]) lost(c Conn) bool {
	c.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == c {
		h.conn = nil
	}
	clear(h.pending)
	if h.closed {
		return false
	}
	for _, s := range h.subs {
		if s.confirmed {
			s.confirmed = false
			s.ready = make(chan struct{})
		}
		s.afterLoss = true
		for _, w := range s.waiters {
			h.policy.Retry(w)
		}
	}
	return true
}

// confirm records the server's confirmation of a SUBSCRIBE; only that of
// the last one sent confirms the subscription.
func (h *Hub[W]) confirm(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.pending[ch]; n > 1 {
		h.pending[ch] = n - 1
		return
	}
	delete(h.pending, ch)
	s := h.subs[ch]
	if s == nil || s.confirmed {
		return
	}
	s.confirmed = true
	close(s.ready)
	if s.afterLoss {
		// Notices may have gone unheard while no connection listened.
		s.afterLoss = false
		for _, w := range s.waiters {
			h.policy.Retry(w)
		}
	}
}
