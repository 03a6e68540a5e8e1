package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DefaultPrefix is the key prefix when none is given.
const DefaultPrefix = "dlock"

// DefaultDialTimeout bounds the connection set-up of [Open] and the "etcd"
// URL scheme when the URL gives no connect_timeout (or dial-timeout, its
// other name): [dlock.DefaultConnectTimeout].
const DefaultDialTimeout = dlock.DefaultConnectTimeout

func init() {
	dlock.Register("etcd", func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
		cfg, prefix, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, cfg, Prefix(prefix))
	})
}

// parseURL turns an etcd:// URL into a client configuration and a prefix.
func parseURL(u *url.URL) (clientv3.Config, string, error) {
	var cfg clientv3.Config
	bad := func(format string, args ...any) (clientv3.Config, string, error) {
		return cfg, "", &kindError{kind: dlock.ErrInvalidOption, msg: fmt.Sprintf("etcd URL %q: "+format, append([]any{u.Redacted()}, args...)...)}
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("want etcd://host:port[,host:port...]/prefix")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("empty endpoint")
		}
		cfg.Endpoints = append(cfg.Endpoints, "http://"+h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cfg.DialTimeout = DefaultDialTimeout
	q := u.Query()
	if _, ok := q["dial-timeout"]; ok {
		// etcdctl's name for the same setting.
		if _, both := q[connect.Param]; both {
			return bad("connect_timeout and dial-timeout are the same setting; give one")
		}
		q[connect.Param] = q["dial-timeout"]
		delete(q, "dial-timeout")
	}
	d, err := connect.Take(q, DefaultDialTimeout)
	if err != nil {
		return bad("%v", err)
	}
	if d == 0 {
		d = time.Duration(math.MaxInt64) // etcd takes 0 for its own default
	}
	cfg.DialTimeout = d
	for k := range q {
		return bad("unknown parameter %q (known: connect_timeout, dial-timeout)", k)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return cfg, prefix, nil
}

// An Option configures a Backend.
type Option func(*Backend)

// Prefix sets the key prefix under which the backend keeps its locks
// (default [DefaultPrefix]): the lock NAME lives under PREFIX/NAME/, with "%"
// and "/" in NAME escaped as %25 and %2F. Backends that share a prefix see
// the same locks. Leading and trailing slashes are dropped; an empty prefix
// means the default.
func Prefix(p string) Option {
	return func(b *Backend) {
		if p = strings.Trim(p, "/"); p != "" {
			b.prefix = p
		}
	}
}

// Backend is a [dlock.Backend] on an etcd cluster. It is safe for concurrent
// use.
type Backend struct {
	cli    *clientv3.Client
	own    bool // Close closes cli
	prefix string
	desc   string
	ka     *keepAlives

	mu      sync.Mutex
	closed  bool
	spares  map[int64][]spareLease // leases without keys for reuse, by TTL
	nspares int
	bg      sync.WaitGroup // lease revocations in the background
	bgSem   chan struct{}
}

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
)

// New returns a backend that uses the etcd client cli. The backend does not
// own cli: Close leaves it open.
func New(cli *clientv3.Client, opts ...Option) *Backend {
	b := &Backend{
		cli:    cli,
		prefix: DefaultPrefix,
		ka:     &keepAlives{leases: clientv3.RetryLeaseClient(cli)},
		bgSem:  make(chan struct{}, 64),
	}
	for _, o := range opts {
		o(b)
	}
	b.desc = "etcd " + strings.Join(trimScheme(cli.Endpoints()), ",") + "/" + b.prefix
	return b
}

// Open connects to the cluster described by cfg, waits for an answer from
// one of its members (for at most the dial timeout) and returns a backend
// that owns the connection: Close closes it. Unless cfg says otherwise it
// uses a silent logger, a dial timeout of [DefaultDialTimeout] (shortened
// to ctx's deadline) and gRPC keep-alive pings every 10 s. ctx bounds the
// connection set-up only. An unreachable cluster is an error matching
// [dlock.ErrBackendUnavailable].
func Open(ctx context.Context, cfg clientv3.Config, opts ...Option) (*Backend, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, &kindError{kind: dlock.ErrInvalidOption, msg: "etcd: no endpoints"}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < cfg.DialTimeout {
		cfg.DialTimeout = max(time.Until(dl), time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.DialKeepAliveTime == 0 {
		cfg.DialKeepAliveTime = 10 * time.Second
		cfg.DialKeepAliveTimeout = 5 * time.Second
	}
	addrs := strings.Join(trimScheme(cfg.Endpoints), ",")
	probe := new(connect.Probe)
	if tcpOnly(cfg.Endpoints) {
		dial := probe.Dial(nil)
		cfg.DialOptions = append(cfg.DialOptions[:len(cfg.DialOptions):len(cfg.DialOptions)],
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }))
	}
	pctx, cancel := connect.Bound(ctx, cfg.DialTimeout)
	defer cancel()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, etcdServer.Explain(pctx, addrs, probe, err)
	}
	// One answer from one member, within the dial timeout, tells that the
	// endpoints are right; the cluster may still be electing a leader.
	_, err = cli.Get(pctx, "dlock-open-check", clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		err := etcdServer.Explain(pctx, addrs, probe, err)
		cli.Close()
		return nil, err
	}
	probe.Done()
	b := New(cli, opts...)
	b.own = true
	return b, nil
}

// etcdServer names etcd in the errors of Open.
var etcdServer = connect.Server{
	Backend: "etcd",
	Kind:    "etcd",
	Auth: func(err error) bool {
		return errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
			errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied)
	},
}

// tcpOnly reports whether every endpoint is reached over TCP, which is
// how the probe dials.
func tcpOnly(eps []string) bool {
	for _, e := range eps {
		if strings.HasPrefix(e, "unix") {
			return false
		}
	}
	return true
}

func trimScheme(eps []string) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		e = strings.TrimPrefix(e, "http://")
		out[i] = strings.TrimPrefix(e, "https://")
	}
	return out
}

// Client returns the etcd client of the backend.
func (b *Backend) Client() *clientv3.Client { return b.cli }

// String describes the backend: "etcd ENDPOINTS/PREFIX".
func (b *Backend) String() string { return b.desc }

// Close revokes the backend's spare leases (which hold no keys), waits for
// the revocations still in flight (at most a few seconds) and, if the
// backend opened its own connection, closes it. It does not release held
// locks: their keys expire with their leases.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	spares := b.spares
	b.spares, b.nspares = nil, 0
	for _, ps := range spares {
		b.bg.Add(len(ps))
	}
	b.mu.Unlock()
	for _, ps := range spares {
		for _, p := range ps {
			b.revoke(p.id)
		}
	}
	b.bg.Wait()
	b.ka.close()
	if b.own {
		return b.cli.Close()
	}
	return nil
}

// kindError is an error of this package: it matches its dlock sentinel with
// errors.Is and unwraps to its cause, but prints only the message and the
// cause (the Client prints the sentinel).
type kindError struct {
	kind error
	msg  string
	err  error
}

func (e *kindError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *kindError) Is(target error) bool { return target == e.kind }
func (e *kindError) Unwrap() error        { return e.err }

func lostf(format string, args ...any) error {
	return &kindError{kind: dlock.ErrLeaseLost, msg: fmt.Sprintf(format, args...)}
}

// wrap classifies err from an etcd call made for what: unreachable or
// leaderless clusters match dlock.ErrBackendUnavailable; the caller's
// context ending is passed on as is.
func wrap(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("etcd: %s: %w", what, err)
	}
	if transient(err) {
		return &kindError{kind: dlock.ErrBackendUnavailable, msg: "etcd: " + what, err: err}
	}
	return fmt.Errorf("etcd: %s: %w", what, err)
}
