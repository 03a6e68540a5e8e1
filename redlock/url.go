package redlock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/errkind"
	"github.com/dlock-dev/dlock/internal/redisconn" // also: go-redis logs to slog
	"github.com/dlock-dev/dlock/internal/urlq"
	goredis "github.com/redis/go-redis/v9"
)

func init() { connect.Register([]string{"redlock", "redlocks"}, ParseURL, Open) }

// ParseURL returns the masters and options of a redlock URL, for [Open].
// The form is
//
//	redlock://[USER:PASSWORD@]HOST:PORT,HOST:PORT,...[?OPTIONS]
//	redlocks://...   (TLS)
//
// listing every master once (the default port is 6379; a master listed
// twice is an error from [Open]). USER and PASSWORD apply
// to all of them ([Credentials]). OPTIONS:
//
//	key_prefix=dlock     KeyPrefix
//	node_timeout=250ms   NodeTimeout (also the clients' dial timeout)
//	drift_factor=0.01    DriftFactor
//	db=0                 DB, the database number on every master
//	connect_timeout=10s  ConnectTimeout
//
// A parameter given twice or unknown is an error matching
// [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (addr string, opts []Option, err error) {
	q := urlq.Parse("redlock", u)
	switch {
	case u.Scheme != "redlock" && u.Scheme != "redlocks":
		return "", nil, q.Errorf("scheme %q is not redlock or redlocks", u.Scheme)
	case u.Opaque != "" || u.Host == "":
		return "", nil, q.Errorf("no masters (want %s://HOST:PORT,HOST:PORT,...)", u.Scheme)
	case u.Path != "" && u.Path != "/":
		return "", nil, q.Errorf("a path; use ?db=N for a database number")
	}
	if _, err := redisconn.SplitAddrs(u.Host, "6379"); err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	if u.User != nil {
		pass, _ := u.User.Password()
		opts = append(opts, Credentials(u.User.Username(), pass))
	}
	if u.Scheme == "redlocks" {
		opts = append(opts, TLS(nil))
	}
	urlq.Add(&opts, "key_prefix", q.String, KeyPrefix)
	urlq.Add(&opts, "node_timeout", q.Duration, NodeTimeout)
	urlq.Add(&opts, "drift_factor", q.Float, DriftFactor)
	urlq.Add(&opts, "db", q.Int, DB)
	urlq.Add(&opts, connect.Param, urlq.ParsedBy(q, connect.ParseTimeout), ConnectTimeout)
	if _, err := q.Done(nil); err != nil {
		return "", nil, err
	}
	if errs := newConfig(opts).errs; len(errs) > 0 {
		return "", nil, q.Errorf("%s", strings.Join(errs, "; "))
	}
	return u.Host, opts, nil
}

// Open opens a backend on addr, a comma list of the masters' HOST:PORT
// (the default port is 6379), on clients it makes and owns (Close closes
// them). It pings every master and fails, with an error that matches
// [dlock.ErrBackendUnavailable] and [dlock.ErrNoQuorum] and says why each
// silent master failed, unless a quorum answers within [ConnectTimeout]
// and ctx. dlock.Open calls it with [ParseURL] for the redlock and
// redlocks schemes.
func Open(ctx context.Context, addr string, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	addrs, err := redisconn.SplitAddrs(addr, "6379")
	if err != nil {
		return nil, errkind.Errorf(dlock.ErrInvalidOption, "redlock: %v", err)
	}
	clients, probes := dial(addrs, cfg)
	b, err := newBackend(clients, cfg)
	if err != nil {
		for _, c := range clients {
			c.Close()
		}
		return nil, err
	}
	b.owned = true
	if err := b.reachQuorum(ctx, cfg.dial.connectTimeout, probes); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// dial makes a client for each master, with a probe watching its
// connections.
func dial(addrs []string, cfg config) ([]*goredis.Client, []*connect.Probe) {
	d, nt := cfg.dial, cfg.nodeTimeout
	var clients []*goredis.Client
	var probes []*connect.Probe
	for _, a := range addrs {
		o := &goredis.Options{
			Addr: a, Username: d.user, Password: d.password, DB: d.db,
			ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: nt, ReadTimeout: nt, WriteTimeout: nt,
		}
		if d.tls {
			o.TLSConfig = d.tlsConfig
			if o.TLSConfig == nil {
				o.TLSConfig = tlsConfig(a)
			}
		}
		c := goredis.NewClient(o)
		p := new(connect.Probe)
		c.AddHook(redisconn.Probe(p))
		clients, probes = append(clients, c), append(probes, p)
	}
	return clients, probes
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
