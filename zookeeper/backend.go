package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/go-zookeeper/zk"
)

func init() { connect.Register([]string{"zk", "zookeeper"}, ParseURL, Open) }

// Backend is a dlock.Backend on a ZooKeeper ensemble. It is safe for
// concurrent use. Its locks live in one ZooKeeper session: the session of
// the connection made by Open, or of the connection given to New.
type Backend struct {
	conn   *zk.Conn
	events <-chan zk.Event // the own connection's event channel; nil with New
	wire   *wire           // nil with New
	cfg    config
	desc   string
	base   time.Time // the monotonic origin of the holds' expiries (see instant)

	mu        sync.Mutex
	sid       int64               // the current session, 0 before the first
	timeout   time.Duration       // the session timeout granted by the servers
	connected bool                // the session is connected (StateHasSession)
	epoch     uint64              // disconnects seen so far
	alive     time.Time           // send time of the latest answered request (New: of ours)
	pending   int64               // the session id of the latest connect response
	lostSid   int64               // the session the clock last declared lost ...
	lostAt    time.Time           // ... for want of an answer since this time
	changed   chan struct{}       // closed and replaced when the session state changes
	holds     []*hold             // the holds the monitor looks after (see forgetLocked)
	byPath    map[string]*hold    // the holds the recursive watch tells about, by node (one per node)
	deleted   [deletedRing]string // the latest node deletions seen, the k-th at k % deletedRing
	evSeq     uint64              // node deletions seen
	arming    atomic.Bool         // a goroutine sets the recursive watch (see armSoonLocked)
	sweepAt   time.Time           // the monitor sweeps again by then (or when kicked)
	orphans   []orphan
	closed    bool
	onLoss    func(dlock.Hold, error) // the Client's loss handler, see ReportLoss

	wake   chan struct{}
	jobs   chan func() // requests for idle workers (see run)
	quit   chan struct{}
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the monitor and every request in flight
}

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.LossReporter = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
)

func newBackend(cfg config, desc string) *Backend {
	b := &Backend{
		cfg:     cfg,
		desc:    desc,
		base:    time.Now(),
		timeout: cfg.sessionTimeout,
		changed: make(chan struct{}),
		byPath:  make(map[string]*hold),
		wake:    make(chan struct{}, 1),
		jobs:    make(chan func()),
		quit:    make(chan struct{}),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// Open connects to the ZooKeeper servers at addr, a comma list of
// "host:port" (a host without a port gets 2181), waits until a session is
// established, ctx is done or the [ConnectTimeout] has passed (then the
// error matches [dlock.ErrBackendUnavailable] and says why; it fails at
// once when every server refused the connection), and returns a
// Backend that owns the connection: Close closes the session, which
// deletes every node the backend still had. Bad options match
// [dlock.ErrInvalidOption].
func Open(ctx context.Context, addr string, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	servers, err := splitServers(addr)
	if err != nil {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "zookeeper: %v", err)
	}
	b := newBackend(cfg, "zookeeper "+strings.Join(servers, ",")+cfg.root)
	b.wire = &wire{base: time.Now(), session: b.onSession, refused: connect.NewRefusals(resolve(ctx, servers)), root: cfg.root}
	conn, events, err := zk.Connect(servers, cfg.sessionTimeout,
		zk.WithDialer(b.wire.dial),
		zk.WithEventCallback(b.onEvent),
		zk.WithLogger(zkLogger{cfg.logger}),
		zk.WithLogInfo(false))
	if err != nil {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "zookeeper: %v", err)
	}
	b.conn, b.events = conn, events
	octx, cancel := connect.Bound(ctx, cfg.connectTimeout)
	defer cancel()
	for {
		b.mu.Lock()
		ok, ch := b.sid != 0 && b.connected, b.changed
		b.mu.Unlock()
		if ok {
			break
		}
		var err error
		select {
		case <-ch:
			continue
		case <-octx.Done():
		case <-b.wire.refused.All():
			// go-zookeeper would try the refused servers again every
			// second until the connect timeout: nothing listens there.
			err = b.wire.refused.Err()
		}
		// go-zookeeper waits for a handshake with no deadline but its
		// own (ten read timeouts): close its connections under it.
		b.cancel()
		b.wire.probe.Abort()
		b.closeConn()
		return nil, zkServer.Explain(octx, strings.Join(servers, ","), &b.wire.probe, err)
	}
	b.wire.probe.Done()
	b.wg.Add(1)
	go b.monitor()
	return b, nil
}

// resolve returns the addresses that go-zookeeper dials for servers: each
// host's addresses, as its DNSHostProvider looks them up; nil if a lookup
// fails (then a refusal does not end Open early).
func resolve(ctx context.Context, servers []string) []string {
	var addrs []string
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return nil
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, port))
		}
	}
	return addrs
}

// New returns a Backend on a connection the caller made with zk.Connect.
// The caller keeps the connection: Close does not close it.
//
// go-zookeeper shows neither the session timeout the servers granted nor
// the connection's pings, so a Backend made by New knows less than one made
// by Open: give the granted timeout with [SessionTimeout]; the backend
// watches the connection's state by polling it (every 50 ms), and its
// session clock starts at its own last answered request instead of the
// last ping. Prefer Open.
func New(conn *zk.Conn, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	cfg.errs.Check(conn != nil, "nil connection")
	if err := cfg.err(); err != nil {
		return nil, err
	}
	b := newBackend(cfg, "zookeeper "+conn.Server()+cfg.root)
	b.conn = conn
	b.poll()
	b.wg.Add(1)
	go b.monitor()
	return b, nil
}

// instant returns t as nanoseconds since b.base on the monotonic clock: a
// hold's expiry in 8 bytes instead of a time.Time's 24.
func (b *Backend) instant(t time.Time) int64 { return int64(t.Sub(b.base)) }

// Conn returns the backend's ZooKeeper connection.
func (b *Backend) Conn() *zk.Conn { return b.conn }

// String describes the backend: "zookeeper" and the servers and root.
func (b *Backend) String() string { return b.desc }

// SessionTimeout returns the session timeout the servers granted (with
// New: the SessionTimeout option). No lease of the backend may have a
// longer TTL.
func (b *Backend) SessionTimeout() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timeout
}

// MaxTTL implements [dlock.TTLLimiter]: the session timeout (at most
// [dlock.MaxTTL]), so that the Client refuses a longer TTL before it
// reaches ZooKeeper.
func (b *Backend) MaxTTL() time.Duration { return min(b.SessionTimeout(), dlock.MaxTTL) }

var _ dlock.TTLLimiter = (*Backend)(nil)

// Close stops the backend's goroutines and, for a backend made by Open,
// closes the session: ZooKeeper then deletes at once every node the
// backend still had. It waits for requests in flight to end.
//
// The dlock Client releases its locks before it closes the backend. If
// holds are still valid when Close is called (the backend was closed under
// a Client, as the conformance suite does to simulate a crash), Close
// keeps their leases' promise: it stops serving requests at once, so that
// renewals fail, and ends the session only when the TTL since each hold's
// last renewal has passed, which is after the leases' deadlines. (When the
// session is not connected, closing cannot end it early, and Close does not
// wait.)
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	connected := b.connected
	var until time.Time
	for _, h := range b.holds {
		if t := b.base.Add(time.Duration(h.expires)); !h.done && h.lost == nil && t.After(until) {
			until = t
		}
	}
	b.mu.Unlock()
	if d := time.Until(until); d > 0 && b.events != nil && connected {
		time.Sleep(d)
	}
	close(b.quit)
	b.cancel()
	if b.events != nil {
		b.closeConn()
	}
	b.wg.Wait()
	return nil
}

// closeConn closes the own connection and waits until go-zookeeper's
// goroutines are done (its event channel is closed last).
func (b *Backend) closeConn() {
	b.conn.Close()
	for range b.events {
	}
}

// Stats are counts of the traffic of a Backend made by Open, for
// benchmarks and tests.
type Stats struct {
	// Requests counts the requests sent, by operation ("create",
	// "delete", "exists", "getData", "setData", "getChildren2", "multi",
	// "createContainer", "ping", "closeSession", ...).
	Requests map[string]int64
	// WatchEvents counts the watch notifications received.
	WatchEvents int64
}

// Total returns the number of requests sent, pings left out.
func (s Stats) Total() int64 {
	var n int64
	for op, c := range s.Requests {
		if op != "ping" {
			n += c
		}
	}
	return n
}

// Stats returns the traffic counts so far; for a Backend made by New they
// are empty.
func (b *Backend) Stats() Stats {
	s := Stats{Requests: make(map[string]int64)}
	if b.wire == nil {
		return s
	}
	for i := range b.wire.ops {
		if n := b.wire.ops[i].Load(); n > 0 {
			name := opNames[i]
			if name == "" {
				name = fmt.Sprintf("op%d", i)
			}
			s.Requests[name] += n
		}
	}
	s.WatchEvents = b.wire.notify.Load()
	return s
}

// zkServer names ZooKeeper in the errors of Open.
var zkServer = connect.Server{Backend: "zookeeper", Kind: "ZooKeeper"}

// zkLogger sends go-zookeeper's log lines to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

// Errors.

// unavailable wraps an error of the connection as ErrBackendUnavailable;
// context errors pass unchanged.
func (b *Backend) unavailable(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, dlock.ErrClosed) || errors.Is(err, dlock.ErrBackendUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", dlock.ErrBackendUnavailable, what, err)
}

func lostErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", dlock.ErrLeaseLost, fmt.Sprintf(format, args...))
}

// answered reports whether err is an answer of the server (so the request
// reached it) rather than a failure of the connection.
func answered(err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrSessionExpired),
		errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrUnknown),
		errors.Is(err, dlock.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	var ne interface{ Timeout() bool }
	return !errors.As(err, &ne)
}

// call runs one request with ctx: it returns ctx.Err() when ctx ends first
// (go-zookeeper's requests have no context; the request goes on and its
// answer is dropped). It records the request's send time as the session's
// latest sign of life when the server answered.
func call[T any](b *Backend, ctx context.Context, f func() (T, error)) (T, error) {
	return callLate(b, ctx, f, nil)
}

// callLate is call with a function that gets the result when it arrives
// after ctx ended (and the caller has gone).
func callLate[T any](b *Backend, ctx context.Context, f func() (T, error), late func(T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, dlock.ErrClosed
	}
	b.wg.Add(1)
	b.mu.Unlock()
	type result struct {
		v   T
		err error
	}
	sent := time.Now()
	done := make(chan result, 1)
	var claimed atomic.Bool // by the caller giving up, or by the answer
	b.run(func() {
		defer b.wg.Done()
		v, err := f()
		if answered(err) {
			b.markAlive(sent)
		}
		if claimed.CompareAndSwap(false, true) {
			done <- result{v, err}
		} else if late != nil {
			late(v, err)
		}
	})
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			return zero, ctx.Err()
		}
		r := <-done // the answer came first
		return r.v, r.err
	}
}

// run runs job on a worker goroutine: an idle one if there is one, else a
// new one. Workers outlive their job for workerIdle, so that a busy
// backend reuses goroutines whose stacks have already grown to what
// go-zookeeper's encoding needs, instead of growing a new one for every
// request. The caller holds a count of b.wg, so adding the new worker's
// is safe beside Close's Wait.
func (b *Backend) run(job func()) {
	select {
	case b.jobs <- job:
		return
	default:
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(workerIdle)
		defer t.Stop()
		for {
			job()
			t.Reset(workerIdle)
			select {
			case job = <-b.jobs:
			case <-t.C:
				return
			case <-b.quit:
				return
			}
		}
	}()
}

// workerIdle is how long a request goroutine waits for the next request.
const workerIdle = 5 * time.Second

// The requests the backend makes.

func (b *Backend) children(ctx context.Context, path string) ([]string, error) {
	return call(b, ctx, func() ([]string, error) {
		kids, _, err := b.conn.Children(path)
		return kids, err
	})
}

type getResult struct {
	data  []byte
	stat  *zk.Stat
	watch <-chan zk.Event
}

func (b *Backend) get(ctx context.Context, path string, watch bool) (getResult, error) {
	return call(b, ctx, func() (getResult, error) {
		if watch {
			d, st, ch, err := b.conn.GetW(path)
			return getResult{d, st, ch}, err
		}
		d, st, err := b.conn.Get(path)
		return getResult{data: d, stat: st}, err
	})
}

func (b *Backend) exists(ctx context.Context, path string) (*zk.Stat, error) {
	return call(b, ctx, func() (*zk.Stat, error) {
		ok, st, err := b.conn.Exists(path)
		if err == nil && !ok {
			return nil, zk.ErrNoNode
		}
		return st, err
	})
}

// existsW is exists that also leaves a watch on the node (when it exists),
// whose channel gets the node's next change.
func (b *Backend) existsW(ctx context.Context, path string) (*zk.Stat, <-chan zk.Event, error) {
	r, err := call(b, ctx, func() (getResult, error) {
		ok, st, ch, err := b.conn.ExistsW(path)
		if err == nil && !ok {
			return getResult{}, zk.ErrNoNode
		}
		return getResult{stat: st, watch: ch}, err
	})
	return r.stat, r.watch, err
}

func (b *Backend) set(ctx context.Context, path string, data []byte, version int32) (*zk.Stat, error) {
	return call(b, ctx, func() (*zk.Stat, error) { return b.conn.Set(path, data, version) })
}

func (b *Backend) del(ctx context.Context, path string, version int32) error {
	_, err := call(b, ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(path, version) })
	return err
}

// ReportLoss registers the Client's handler for holds found lost by the
// session: ZooKeeper expired the session, the session clock ran out, or a
// disconnect under LossOnDisconnect. The Client then ends those leases at
// once instead of at its next renewal.
func (b *Backend) ReportLoss(handler func(dlock.Hold, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onLoss = handler
}
