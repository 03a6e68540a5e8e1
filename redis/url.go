package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/redisconn"
	"github.com/dlock-dev/dlock/internal/urlq"
	goredis "github.com/redis/go-redis/v9"
)

// schemes are the URL schemes the package registers with dlock.Register.
var schemes = []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"}

func init() { connect.Register(schemes, ParseURL, Open) }

// ParseURL returns the address and options of a Redis URL, for [Open].
// The forms are:
//
//	redis://[USER:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]
//	rediss://...                                            (TLS)
//	redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB][?OPTIONS]
//	rediss+sentinel://...
//	redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?OPTIONS]
//	rediss+cluster://...
//
// The default port is 6379, and 26379 for Sentinels. USER and PASSWORD are
// those of the data nodes; the Sentinels' own credentials, if any, go in the
// options sentinel_username and sentinel_password. OPTIONS are go-redis's
// (dial_timeout=3s, read_timeout=..., pool_size=..., as redis.ParseURL,
// redis.ParseClusterURL and redis.ParseFailoverURL take them) and dlock's:
//
//	key_prefix=dlock               KeyPrefix
//	waiter_timeout=5s              WaiterTimeout
//	wait_replicas=1                WaitReplicas, with
//	wait_replicas_timeout=500ms    its timeout (default 1s)
//	clock_tokens=false             ClockTokens(false): the opt-out, see its risk
//	connect_timeout=10s            ConnectTimeout
//
// A parameter given twice, or that neither dlock nor go-redis knows, is an
// error matching [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (addr string, opts []Option, err error) {
	q := urlq.Parse("redis", u)
	base, kind, _ := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" || kind != "" && kind != "sentinel" && kind != "cluster" {
		return "", nil, q.Errorf("scheme %q is not one of %s", u.Scheme, strings.Join(schemes, ", "))
	}
	if u.Opaque != "" || u.Host == "" {
		return "", nil, q.Errorf("no host (want %s://HOST:PORT...)", u.Scheme)
	}
	if u.User != nil {
		pass, _ := u.User.Password()
		opts = append(opts, Credentials(u.User.Username(), pass))
	}
	if base == "rediss" {
		opts = append(opts, TLS(nil))
	}
	where, err := pathOptions(kind, u)
	if err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	opts = append(opts, where...)
	if kind == "sentinel" {
		user, hasUser := q.String("sentinel_username")
		pass, hasPass := q.String("sentinel_password")
		if hasUser || hasPass {
			opts = append(opts, SentinelCredentials(user, pass))
		}
	}
	qopts, err := queryOptions(q)
	if err != nil {
		return "", nil, err
	}
	opts = append(opts, qopts...)
	params, err := q.Done(func(k string) bool { return k != "addr" && k != "master_name" })
	if err != nil {
		return "", nil, err
	}
	if err := checkParams(kind, params); err != nil {
		return "", nil, q.Errorf("%s", strings.TrimPrefix(err.Error(), "redis: "))
	}
	if len(params) > 0 {
		opts = append(opts, clientParams(params))
	}
	c := newConfig(opts)
	if len(c.errs) > 0 {
		return "", nil, q.Errorf("%s", strings.Join(c.errs, "; "))
	}
	if _, err := redisconn.SplitAddrs(u.Host, c.dial.defaultPort()); err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	if kind == "" && strings.Contains(u.Host, ",") {
		return "", nil, q.Errorf("%s:// takes one address; use %s+cluster:// or %s+sentinel:// for several", base, base, base)
	}
	return u.Host, opts, nil
}

// pathOptions returns the options the URL's path holds: the database
// number, and the master's name for a Sentinel URL.
func pathOptions(kind string, u *url.URL) ([]Option, error) {
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	var opts []Option
	switch kind {
	case "cluster":
		if len(parts) > 0 {
			return nil, fmt.Errorf("a cluster URL has no database path (got %q)", u.Path)
		}
		return []Option{Cluster()}, nil
	case "sentinel":
		if len(parts) < 1 || len(parts) > 2 {
			return nil, fmt.Errorf("a sentinel URL needs the master's name as its path: %s://HOST:PORT/MASTER[/DB]", u.Scheme)
		}
		opts, parts = append(opts, Sentinel(parts[0])), parts[1:]
	default:
		if len(parts) > 1 {
			return nil, fmt.Errorf("invalid database path %q", u.Path)
		}
	}
	if len(parts) == 1 {
		n, err := strconv.Atoi(parts[0])
		if err != nil {
			return nil, fmt.Errorf("invalid database number %q", parts[0])
		}
		opts = append(opts, DB(n))
	}
	return opts, nil
}

// queryOptions takes dlock's own parameters from q.
func queryOptions(q *urlq.Query) ([]Option, error) {
	var opts []Option
	urlq.Add(&opts, "key_prefix", q.String, KeyPrefix)
	urlq.Add(&opts, "waiter_timeout", q.Duration, WaiterTimeout)
	n, hasN := q.Int("wait_replicas")
	t, hasT := q.Duration("wait_replicas_timeout")
	switch {
	case hasN && hasT:
		opts = append(opts, WaitReplicas(n, t))
	case hasN:
		opts = append(opts, WaitReplicas(n, time.Second))
	case hasT:
		return nil, q.Errorf("wait_replicas_timeout without wait_replicas")
	}
	urlq.Add(&opts, connect.Param, urlq.ParsedBy(q, connect.ParseTimeout), ConnectTimeout)
	urlq.Add(&opts, "clock_tokens", q.Bool, ClockTokens)
	urlq.Add(&opts, "context_timeout_enabled", q.Bool, contextTimeouts)
	return opts, nil
}

// checkParams checks go-redis's parameters as its parser for kind does:
// names it does not know and values it cannot read are errors.
func checkParams(kind string, params url.Values) error {
	for k, vs := range params {
		if len(vs) > 1 {
			return fmt.Errorf("parameter %s is given %d times", k, len(vs))
		}
	}
	u := url.URL{Scheme: "redis", Host: "localhost:6379", RawQuery: params.Encode()}
	var err error
	switch kind {
	case "cluster":
		_, err = goredis.ParseClusterURL(u.String())
	case "sentinel":
		u.RawQuery = withMaster(params, "m").Encode()
		_, err = goredis.ParseFailoverURL(u.String())
	default:
		_, err = goredis.ParseURL(u.String())
	}
	return err
}

// withMaster returns a copy of params with master_name set.
func withMaster(params url.Values, master string) url.Values {
	q := url.Values{}
	for k, vs := range params {
		q[k] = vs
	}
	q.Set("master_name", master)
	return q
}

func (d *dialConfig) defaultPort() string {
	if d.sentinel != "" {
		return "26379"
	}
	return "6379"
}

// Open opens a backend on a go-redis client it makes and owns (Close
// closes it), and checks that the server answers and is recent enough
// within [ConnectTimeout] and ctx. addr is HOST:PORT, or with [Sentinel]
// or [Cluster] a comma list of them. The client is made with
// ContextTimeoutEnabled (unless the go-redis parameter
// context_timeout_enabled of a URL says otherwise), so that context
// deadlines bound its reads and writes. [dlock.Open] calls it with
// [ParseURL] for the schemes above.
func Open(ctx context.Context, addr string, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	hosts, err := redisconn.SplitAddrs(addr, cfg.dial.defaultPort())
	if err != nil {
		cfg.errs = append(cfg.errs, err.Error())
	}
	var rdb goredis.UniversalClient
	server := redisconn.Server
	if len(cfg.errs) == 0 {
		rdb, server.Backend, err = cfg.dial.client(hosts)
		if err != nil {
			cfg.errs = append(cfg.errs, err.Error())
		}
	}
	if len(cfg.errs) > 0 {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "redis: %s", strings.Join(cfg.errs, "; "))
	}
	desc := server.Backend + " " + strings.Join(hosts, ",")
	if cfg.dial.db != 0 {
		desc += "/" + strconv.Itoa(cfg.dial.db)
	}
	if cfg.desc == "" {
		cfg.desc = desc
	}
	b, err := newBackend(rdb, cfg)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	b.owned = true
	if err := b.connect(ctx, hosts, server); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// connect checks, within the connect timeout, that the server answers and
// is recent enough, and says why not.
func (b *Backend) connect(ctx context.Context, hosts []string, server connect.Server) error {
	probe := new(connect.Probe)
	b.rdb.AddHook(redisconn.Probe(probe))
	ctx, cancel := connect.Bound(ctx, b.cfg.dial.connectTimeout)
	defer cancel()
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		if errors.Is(classify(err), ErrServerTooOld) {
			return fmt.Errorf("%s: %w", b.desc, classify(err))
		}
		return server.Explain(ctx, strings.Join(hosts, ","), probe, err)
	}
	probe.Done()
	if err := b.ready(ctx); err != nil {
		return fmt.Errorf("%s: %w", b.desc, err)
	}
	return nil
}

// client makes the go-redis client of hosts, through go-redis's URL
// parsers so that its URL parameters mean what they mean there. It returns
// the client and what kind of server it reaches, for messages. Owned
// clients apply context deadlines to their reads and writes (go-redis's
// default is not to), unless the URL says otherwise.
func (d *dialConfig) client(hosts []string) (goredis.UniversalClient, string, error) {
	q := url.Values{}
	for k, vs := range d.params {
		q[k] = vs
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := url.URL{Scheme: "redis", Host: hosts[0]}
	if d.tls {
		u.Scheme = "rediss"
	}
	var data *url.Userinfo
	if d.user != "" || d.password != "" {
		data = url.UserPassword(d.user, d.password)
	}
	switch {
	case d.cluster && d.sentinel != "":
		return nil, "", errors.New("Cluster and Sentinel exclude each other")
	case d.cluster:
		if d.db != 0 {
			return nil, "", fmt.Errorf("a Cluster has no database %d", d.db)
		}
		u.User, u.RawQuery = data, q.Encode()
		o, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return nil, "", err
		}
		d.setTLS(&o.TLSConfig)
		o.ContextTimeoutEnabled = !d.noCtxTimeouts
		return goredis.NewClusterClient(o), "redis cluster", nil
	case d.sentinel != "":
		q.Set("master_name", d.sentinel)
		if d.db != 0 {
			q.Set("db", strconv.Itoa(d.db))
		}
		if d.sUser != "" || d.sPass != "" {
			u.User = url.UserPassword(d.sUser, d.sPass)
		}
		u.RawQuery = q.Encode()
		o, err := goredis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, "", err
		}
		o.Username, o.Password = d.user, d.password
		d.setTLS(&o.TLSConfig)
		o.ContextTimeoutEnabled = !d.noCtxTimeouts
		return goredis.NewFailoverClient(o), "redis sentinel " + d.sentinel + " via", nil
	default:
		if len(hosts) > 1 {
			return nil, "", errors.New("several addresses need Cluster or Sentinel")
		}
		q.Del("addr")
		u.User, u.Path, u.RawQuery = data, "/"+strconv.Itoa(d.db), q.Encode()
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return nil, "", err
		}
		d.setTLS(&o.TLSConfig)
		o.ContextTimeoutEnabled = !d.noCtxTimeouts
		return goredis.NewClient(o), "redis", nil
	}
}

// setTLS puts the TLS configuration given to [TLS] in place of go-redis's
// default one (which checks the host name).
func (d *dialConfig) setTLS(c **tls.Config) {
	if d.tlsConfig != nil {
		*c = d.tlsConfig
	}
}
