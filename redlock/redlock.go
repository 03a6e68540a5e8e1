package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/redisconn"
	goredis "github.com/redis/go-redis/v9"
)

// Backend is a [dlock.Backend] on N independent Redis masters. Create it
// with [New] on one go-redis client per master, with [Open] on their
// addresses, or by URL with dlock.Open. It is safe for concurrent use.
type Backend struct {
	nodes  []*goredis.Client
	addrs  []string
	quorum int
	cfg    config
	owned  bool // Close closes the clients
	desc   string
	id     string // the prefix of this Backend's waiter ids (16 hex digits)
	// masters identifies the masters and the key prefix (see mastersKey).
	masters string

	bg          sync.WaitGroup // per-node calls that outlive the operation that started them
	closeOnce   sync.Once
	closed      atomic.Bool
	stop        chan struct{}      // closed by Close: stops the give-back retries
	closing     context.Context    // cancelled by Close: ends renewal calls still under way
	endRenewals context.CancelFunc // cancels closing
	retries     []retryQueue       // per master: give-backs that failed and are retried
	conduits    []conduit          // per master: the calls to it
	notices     []notices          // per master: the release notices to waiters
	woken       testCounter        // waiters woken by release notices
	received    testCounter        // release notices received
	passed      testCounter        // releases that sent a parked waiter's attempt along (see pass.go)
	handedWon   testCounter        // attempts sent along by a release that got this Backend's waiter the lock
	workers     sync.WaitGroup     // goroutines sending queued calls
	pool        sync.WaitGroup     // goroutines of the masters' pools (see spawn)
	quit        chan struct{}      // closed by Close after b.bg: ends the pools
	admission   admission          // bounds the acquisition attempts under way
}

var _ dlock.Backend = (*Backend)(nil)

// New returns a backend on the masters that clients connect to, one client
// per master; a grant needs len(clients)/2+1 of them. A master listed twice
// (the same host and port, after the default port 6379, lower case, and
// localhost as 127.0.0.1) is an error matching [dlock.ErrInvalidOption]:
// it would count twice toward the quorum. Fewer than three masters is
// allowed, with a warning on the backend's [Logger] if one is set (see the package doc). The backend does not
// take the clients over: Close leaves them open. Make the clients with
// ContextTimeoutEnabled, so that the per-node timeout ([NodeTimeout])
// bounds their reads and writes, and with MaxRetries -1: a script whose
// reply was lost must not run twice.
//
// Options that make clients ([Credentials], [DB], [TLS], [ConnectTimeout])
// are Open's only; New rejects them.
func New(clients []*goredis.Client, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if len(cfg.dial.set) > 0 {
		cfg.errs = append(cfg.errs, strings.Join(cfg.dial.set, ", ")+" apply to Open only, which makes the clients")
	}
	return newBackend(clients, cfg)
}

func newBackend(clients []*goredis.Client, cfg config) (*Backend, error) {
	if len(clients) == 0 {
		cfg.errs = append(cfg.errs, "no masters")
	}
	seen := map[string]string{}
	for _, c := range clients {
		if c == nil {
			cfg.errs = append(cfg.errs, "nil client")
			break
		}
		a := c.Options().Addr
		k := masterKey(c.Options())
		if prev, ok := seen[k]; ok {
			cfg.errs = append(cfg.errs, fmt.Sprintf("master %s is listed twice (as %q and %q); each master must count once toward the quorum", k, prev, a))
		}
		seen[k] = a
	}
	if len(cfg.errs) > 0 {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "redlock: %s", strings.Join(cfg.errs, "; "))
	}
	b := &Backend{nodes: clients, quorum: len(clients)/2 + 1, cfg: cfg, stop: make(chan struct{}), quit: make(chan struct{}), retries: make([]retryQueue, len(clients))}
	for _, c := range clients {
		b.addrs = append(b.addrs, c.Options().Addr)
	}
	b.desc = "redlock " + strings.Join(b.addrs, ",")
	if len(clients) < 3 && cfg.logger != nil {
		cfg.logger.Warn("redlock: fewer than three masters: a grant needs every one of them, so one master down stops all grants (use 3 or more, ideally 5)",
			"backend", b.desc, "masters", len(clients), "quorum", b.quorum)
	}
	b.id = newID()[:16]
	b.masters = mastersKey(b)
	b.closing, b.endRenewals = context.WithCancel(context.Background())
	b.startConduits()
	b.startNotices()
	return b, nil
}

// String describes the backend, e.g. "redlock h1:6379,h2:6379,h3:6379".
func (b *Backend) String() string { return b.desc }

// Quorum returns the number of masters a grant and a renewal need.
func (b *Backend) Quorum() int { return b.quorum }

// Close waits for per-node calls still in flight (each is bounded by the
// node timeout), stops retrying give-backs that have not reached their
// masters yet (those holds expire with their TTL), and closes the clients
// if the backend made them.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.stop)
		b.endRenewals()
		b.bg.Wait()
		close(b.quit)
		b.pool.Wait()
		b.workers.Wait()
		for i := range b.notices {
			b.notices[i].close()
		}
		if b.owned {
			for _, c := range b.nodes {
				if cerr := c.Close(); cerr != nil && err == nil {
					err = cerr
				}
			}
		}
	})
	return err
}

// masterKey names the server a client connects to, so that one listed
// twice is found: the port defaults to 6379, host names are compared in
// lower case, localhost and an empty host are 127.0.0.1, and IP addresses
// in their canonical form. Other names of one server (another host name,
// an address of another interface) are not found.
func masterKey(o *goredis.Options) string {
	if o.Network == "unix" {
		return "unix:" + o.Addr
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		host, port = strings.Trim(o.Addr, "[]"), "6379"
	}
	host = strings.ToLower(host)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func (b *Backend) lockKey(name string) string { return b.cfg.prefix + ":{" + encodeName(name) + "}" }

func (b *Backend) channel(name string) string { return b.lockKey(name) + ":wake" }

// fenceKey is the key of the fence of the names in name's Cluster slot
// (see the scripts): at most 16384 per master, whatever the number of
// names.
func (b *Backend) fenceKey(name string) string {
	return redisconn.FenceKey(b.cfg.prefix, redisconn.Slot(encodeName(name)))
}

// keys are the lock hash, the fair queue and its waiters' deadlines, the
// queue of waiters that are not fair and their deadlines, and the fence
// key.
func (b *Backend) keys(name string) []string {
	k := b.lockKey(name)
	suffixes := [...]string{"", ":queue", ":deadlines", ":wqueue", ":wdeadlines"}
	size := 0
	for _, s := range suffixes[1:] {
		size += len(k) + len(s)
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, s := range suffixes[1:] {
		sb.WriteString(k)
		sb.WriteString(s)
	}
	all := sb.String() // one allocation for the four keys that are not k
	keys := make([]string, len(suffixes), len(suffixes)+1)
	keys[0] = k
	at := 0
	for j, s := range suffixes[1:] {
		keys[j+1] = all[at : at+len(k)+len(s)]
		at += len(k) + len(s)
	}
	return append(keys, b.fenceKey(name))
}

// drift is the allowance for clock drift between the masters and this
// process over ttl: ttl×DriftFactor + 2ms, as the Redlock description has
// it.
func (b *Backend) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*b.cfg.drift) + 2*time.Millisecond
}

// nodeCtx bounds one call to one master.
func (b *Backend) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.nodeTimeout)
}

// roundCtx bounds calls made at once to each of the n masters by the node
// timeout, with one context for all of them; each call runs done when it
// ends, and the last one releases the context.
func (b *Backend) roundCtx(ctx context.Context, n int) (rctx context.Context, done func()) {
	return b.boundCtx(ctx, b.cfg.nodeTimeout, n, func() {})
}

// boundCtx is roundCtx with the bound d instead of the node timeout; the
// last call also runs last.
func (b *Backend) boundCtx(ctx context.Context, d time.Duration, n int, last func()) (rctx context.Context, done func()) {
	rctx, cancel := context.WithTimeout(ctx, d)
	var left atomic.Int32
	left.Store(int32(n))
	return rctx, func() {
		if left.Add(-1) == 0 {
			last()
			cancel()
		}
	}
}

func newID() string {
	var buf [32]byte
	const hex = "0123456789abcdef"
	a, c := rand.Uint64(), rand.Uint64()
	for i := range 16 {
		buf[i] = hex[a>>(60-4*i)&15]
		buf[16+i] = hex[c>>(60-4*i)&15]
	}
	return string(buf[:])
}

// countForTests turns the testCounters on; export_test.go sets it, so
// that only a test binary counts.
var countForTests bool

// testCounter is a count that only tests read: it adds nothing outside a
// test binary.
type testCounter struct{ n atomic.Int64 }

// Add adds d when counting for tests.
func (c *testCounter) Add(d int64) {
	if countForTests {
		c.n.Add(d)
	}
}
