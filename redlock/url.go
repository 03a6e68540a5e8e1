package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/redisconn" // also: go-redis logs to slog
	goredis "github.com/redis/go-redis/v9"
)

func init() {
	for _, s := range []string{"redlock", "redlocks"} {
		dlock.Register(s, func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
			return openURL(ctx, u, nil)
		})
	}
}

// OpenURL opens a backend on clients made from rawURL, which the backend
// owns (Close closes them). The form is
//
//	redlock://[USER:PASSWORD@]HOST:PORT,HOST:PORT,...[?OPTIONS]
//	redlocks://...   (TLS)
//
// listing every master (the default port is 6379). USER and PASSWORD apply
// to all of them. OPTIONS:
//
//	key_prefix=dlock     KeyPrefix
//	node_timeout=250ms   NodeTimeout (also the clients' dial timeout)
//	drift_factor=0.01    DriftFactor
//	db=0                 the database number on every master
//	connect_timeout=10s  how long OpenURL waits for a quorum of masters to
//	                     answer (see dlock.DefaultConnectTimeout)
//
// OpenURL pings every master and fails, with an error that matches
// [dlock.ErrBackendUnavailable] and [dlock.ErrNoQuorum] and says why each
// silent master failed, unless a quorum answers within connect_timeout
// (and ctx). The options in opts come after those of the URL. dlock.Open calls it for
// the redlock and redlocks schemes.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: malformed URL: %w", dlock.ErrInvalidOption, err)
	}
	return openURL(ctx, u, opts)
}

func openURL(ctx context.Context, u *url.URL, extra []Option) (*Backend, error) {
	bad := func(format string, args ...any) (*Backend, error) {
		return nil, fmt.Errorf("%w: %s", dlock.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if u.Scheme != "redlock" && u.Scheme != "redlocks" {
		return bad("URL scheme %q is not redlock or redlocks", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("URL %q has no masters (want %s://HOST:PORT,HOST:PORT,...)", u.Redacted(), u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return bad("URL %q has a path; use ?db=N for a database number", u.Redacted())
	}
	var opts []Option
	nodeTimeout := DefaultNodeTimeout
	db := 0
	q := u.Query()
	timeout, err := connect.Take(q, dlock.DefaultConnectTimeout)
	if err != nil {
		return bad("%v", err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "key_prefix":
			opts = append(opts, KeyPrefix(v))
		case "node_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return bad("node_timeout=%q: %v", v, err)
			}
			nodeTimeout = d
			opts = append(opts, NodeTimeout(d))
		case "drift_factor":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return bad("drift_factor=%q is not a number", v)
			}
			opts = append(opts, DriftFactor(f))
		case "db":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return bad("db=%q is not a database number", v)
			}
			db = n
		default:
			return bad("unknown option %q", k)
		}
	}
	opts = append(opts, extra...)
	var addrs []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("URL %q has an empty address", u.Redacted())
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), "6379"
		}
		if host == "" {
			host = "localhost"
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return bad("address %q has a bad port", h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	user, pass := "", ""
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	var clients []*goredis.Client
	var probes []*connect.Probe
	for _, a := range addrs {
		o := &goredis.Options{
			Addr: a, Username: user, Password: pass, DB: db,
			ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: nodeTimeout, ReadTimeout: nodeTimeout, WriteTimeout: nodeTimeout,
		}
		if u.Scheme == "redlocks" {
			o.TLSConfig = tlsConfig(a)
		}
		c := goredis.NewClient(o)
		p := new(connect.Probe)
		c.AddHook(redisconn.Probe(p))
		clients, probes = append(clients, c), append(probes, p)
	}
	b, err := New(clients, opts...)
	if err != nil {
		for _, c := range clients {
			c.Close()
		}
		return nil, err
	}
	b.owned = true
	if err := b.reachQuorum(ctx, timeout, probes); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// reachQuorum pings every master until a quorum has answered, or so
// many have failed that none can be reached, within timeout and ctx.
func (b *Backend) reachQuorum(ctx context.Context, timeout time.Duration, probes []*connect.Probe) error {
	ctx, cancel := connect.Bound(ctx, timeout)
	defer cancel()
	errs := make(chan error, len(b.nodes))
	for i, c := range b.nodes {
		go func() {
			err := c.Ping(ctx).Err()
			if err != nil {
				server := redisconn.Server
				server.Backend = "master"
				err = server.Explain(ctx, b.addrs[i], probes[i], err)
			}
			probes[i].Done()
			errs <- err
		}()
	}
	var failed []string
	ok, n := 0, 0
	for ; n < len(b.nodes) && ok < b.quorum && len(failed) <= len(b.nodes)-b.quorum; n++ {
		if err := <-errs; err != nil {
			failed = append(failed, err.Error())
		} else {
			ok++
		}
	}
	cancel()
	for ; n < len(b.nodes); n++ {
		<-errs
	}
	if ok >= b.quorum {
		return nil
	}
	slices.Sort(failed)
	return fmt.Errorf("%s: %w: %w: %d of %d masters failed, %d must answer: %s", b.desc, dlock.ErrBackendUnavailable, dlock.ErrNoQuorum,
		len(failed), len(b.nodes), b.quorum, strings.Join(failed, "; "))
}
