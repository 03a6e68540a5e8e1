package etcd

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/urlq"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DefaultPrefix is the key prefix when none is given.
const DefaultPrefix = "dlock"

// DefaultDialTimeout bounds the connection set-up of [Open] when no
// [ConnectTimeout] is given (nor connect_timeout or dial-timeout in the
// URL): [dlock.DefaultConnectTimeout].
const DefaultDialTimeout = dlock.DefaultConnectTimeout

func init() { connect.Register([]string{"etcd"}, ParseURL, Open) }

// ParseURL returns the endpoints and options of an "etcd" URL:
//
//	etcd://[user:password@]host1:2379,host2:2379/prefix?connect_timeout=5s
//
// The hosts are the cluster's client endpoints (plain http), the path is
// the [Prefix] ([DefaultPrefix] when empty), the user information gives
// [Auth]. Query parameters: connect_timeout, or dial-timeout (etcdctl's
// name), for [ConnectTimeout]. A repeated or unknown parameter or a bad
// value is refused with [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (addr string, opts []Option, err error) {
	q := urlq.Parse("etcd", u)
	if u.Opaque != "" || u.Host == "" {
		return "", nil, q.Errorf("want etcd://host:port[,host:port...]/prefix")
	}
	if _, err := splitEndpoints(u.Host, false); err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	opts = append(opts, Prefix(u.Path))
	if u.User != nil {
		pw, _ := u.User.Password()
		opts = append(opts, Auth(u.User.Username(), pw))
	}
	ct, ok := urlq.Parsed(q, connect.Param, connect.ParseTimeout)
	dt, dok := urlq.Parsed(q, "dial-timeout", connect.ParseTimeout) // etcdctl's name
	if ok && dok {
		return "", nil, q.Errorf("connect_timeout and dial-timeout are the same setting; give one")
	}
	if dok {
		ct, ok = dt, true
	}
	if ok {
		opts = append(opts, ConnectTimeout(ct))
	}
	if _, err := q.Done(nil); err != nil {
		return "", nil, err
	}
	if err := newConfig(opts).err(); err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	return u.Host, opts, nil
}

// splitEndpoints splits a comma list of endpoints ("host:port", or a URL
// such as "https://host:port") into etcd client endpoints.
func splitEndpoints(addr string, tls bool) ([]string, error) {
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	var eps []string
	for _, h := range strings.Split(addr, ",") {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			return nil, fmt.Errorf("empty endpoint in %q", addr)
		case !strings.Contains(h, "://"):
			h = scheme + h
		}
		eps = append(eps, h)
	}
	return eps, nil
}

// Backend is a [dlock.Backend] on an etcd cluster. It is safe for concurrent
// use.
type Backend struct {
	cli    *clientv3.Client
	own    bool // Close closes cli
	prefix string
	desc   string
	ka     *keepAlives
	hub    watchHub // the waiters' watches

	leases  leases        // the shared leases, by TTL
	tracked tracked       // the holds on them
	seq     atomic.Uint64 // numbers the acquisitions' keys
	keys    keyPool       // deleted keys, to use again
	reent   reentries     // fresh owners' keys re-entered or being deleted
	listed  listings      // of the keys on the shared leases, for renewals
	quit    chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	bg     sync.WaitGroup // deletions and revocations in the background
	bgSem  chan struct{}
}

var (
	_ dlock.Backend      = (*Backend)(nil)
	_ dlock.BatchRenewer = (*Backend)(nil)
	_ dlock.Inspector    = (*Backend)(nil)
)

// New returns a backend that uses the etcd client cli, which the caller
// owns: Close leaves it open. Of the options, only [Prefix] applies; the
// others configure the client that [Open] makes, and New refuses them with
// [dlock.ErrInvalidOption].
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	cfg.errs.Check(cli != nil, "nil client")
	cfg.errs.Check(len(cfg.dialing) == 0, "New takes a client the caller built; %s configure Open's client", strings.Join(cfg.dialing, ", "))
	if err := cfg.err(); err != nil {
		return nil, err
	}
	return newBackend(cli, cfg), nil
}

func newBackend(cli *clientv3.Client, cfg config) *Backend {
	b := &Backend{
		cli:    cli,
		prefix: cfg.prefix,
		ka:     &keepAlives{leases: clientv3.RetryLeaseClient(cli)},
		bgSem:  make(chan struct{}, 64),
		quit:   make(chan struct{}),
	}
	b.hub.b = b
	b.listed.seed = maphash.MakeSeed()
	b.desc = "etcd " + strings.Join(trimScheme(cli.Endpoints()), ",") + "/" + b.prefix
	return b
}

// Open connects to the cluster at addr, a comma list of its client
// endpoints ("host:port,host:port"; an endpoint may also be a URL such as
// "https://host:port"), waits for an answer from one of its members and
// returns a backend that owns the client: Close closes it. ctx and
// [ConnectTimeout] bound the connection set-up only. The client logs
// nothing unless [Logger] is given and pings the cluster every 10 s. An
// unreachable cluster is an error matching [dlock.ErrBackendUnavailable]
// that says why; bad options match [dlock.ErrInvalidOption].
func Open(ctx context.Context, addr string, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	eps, err := splitEndpoints(addr, cfg.tls != nil)
	if err != nil {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "etcd: %v", err)
	}
	cc := clientv3.Config{
		Endpoints:            eps,
		Username:             cfg.username,
		Password:             cfg.password,
		TLS:                  cfg.tls,
		Logger:               cfg.logger,
		DialTimeout:          cfg.connectTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		DialOptions:          slices.Clip(cfg.dialOptions),
	}
	if cc.Logger == nil {
		cc.Logger = zap.NewNop()
	}
	if cc.DialTimeout == 0 {
		cc.DialTimeout = time.Duration(math.MaxInt64) // etcd takes 0 for its own default
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < cc.DialTimeout {
		cc.DialTimeout = max(time.Until(dl), time.Millisecond)
	}
	probe := new(connect.Probe)
	var refused *connect.Refusals
	if tcpOnly(eps) {
		refused = connect.NewRefusals(trimScheme(eps))
		dial := probe.Dial(nil)
		cc.DialOptions = append(cc.DialOptions,
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := dial(ctx, "tcp", addr)
				refused.Note(addr, err)
				return c, err
			}))
	}
	addrs := strings.Join(trimScheme(eps), ",")
	pctx, cancel := connect.Bound(ctx, cfg.connectTimeout)
	defer cancel()
	// gRPC dials a refused endpoint again and again until the timeout:
	// when every endpoint refused, nothing listens there, so give up.
	rctx, rcancel := context.WithCancel(pctx)
	defer rcancel()
	go func() {
		select {
		case <-refused.All():
			rcancel()
		case <-rctx.Done():
		}
	}()
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, etcdServer.Explain(pctx, addrs, probe, err)
	}
	// One answer from one member, within the dial timeout, tells that the
	// endpoints are right; the cluster may still be electing a leader.
	_, err = cli.Get(rctx, "dlock-open-check", clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		if pctx.Err() == nil && refused.Err() != nil {
			err = refused.Err()
		}
		err := etcdServer.Explain(pctx, addrs, probe, err)
		cli.Close()
		return nil, err
	}
	probe.Done()
	b := newBackend(cli, cfg)
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

// Close waits for the deletions and revocations still in flight (at most a
// few seconds), revokes the backend's shared leases that hold no keys and,
// if the backend opened its own connection, closes it. It does not release
// held locks: their keys expire with their lease, which nothing keeps
// alive any more.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.quit)
	b.mu.Unlock()
	b.hub.close()
	b.bg.Wait()
	b.closeLeases()
	b.ka.close()
	if b.own {
		return b.cli.Close()
	}
	return nil
}

func lostf(format string, args ...any) error {
	return errkind.Errorf(dlock.ErrLeaseLost, format, args...)
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
		return errkind.Errorf(dlock.ErrBackendUnavailable, "etcd: %s: %w", what, err)
	}
	return fmt.Errorf("etcd: %s: %w", what, err)
}
