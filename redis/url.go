package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/redisconn"
	goredis "github.com/redis/go-redis/v9"
)

// schemes are the URL schemes the package registers with dlock.Register.
var schemes = []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"}

func init() {
	for _, s := range schemes {
		dlock.Register(s, func(ctx context.Context, u *url.URL) (dlock.Backend, error) {
			return openURL(ctx, u, nil)
		})
	}
}

// OpenURL opens a backend on a go-redis client made from rawURL, which the
// backend owns (Close closes it), and checks that the server answers and is
// recent enough; ctx bounds that check. The forms are:
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
//	connect_timeout=10s            how long OpenURL waits for the server (see dlock.DefaultConnectTimeout)
//
// Unless the URL sets context_timeout_enabled, the client is made with
// ContextTimeoutEnabled, so that context deadlines bound its reads and
// writes. The options in opts come after those of the URL. [dlock.Open] calls it for
// the schemes above.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, which may carry a password
		}
		return nil, fmt.Errorf("%w: malformed URL: %w", dlock.ErrInvalidOption, err)
	}
	return openURL(ctx, u, opts)
}

func openURL(ctx context.Context, u *url.URL, extra []Option) (*Backend, error) {
	bad := func(format string, args ...any) (*Backend, error) {
		return nil, fmt.Errorf("%w: %s", dlock.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	base, kind, _ := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" || kind != "" && kind != "sentinel" && kind != "cluster" {
		return bad("URL scheme %q is not one of %s", u.Scheme, strings.Join(schemes, ", "))
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("URL %q has no host (want %s://HOST:PORT...)", u.Redacted(), u.Scheme)
	}
	q := u.Query()
	opts, err := takeOptions(q)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidOption, err)
	}
	timeout, err := connect.Take(q, dlock.DefaultConnectTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidOption, err)
	}
	opts = append(opts, extra...)
	defPort := "6379"
	if kind == "sentinel" {
		defPort = "26379"
	}
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("URL %q has an empty address", u.Redacted())
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort
		}
		if host == "" {
			host = "localhost"
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return bad("address %q has a bad port", h)
		}
		hosts = append(hosts, net.JoinHostPort(host, port))
	}
	// rebuild makes the URL for go-redis's parsers: the first address as
	// host, the others as addr parameters.
	rebuild := func(user *url.Userinfo, path string, q url.Values) string {
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		v := url.URL{Scheme: base, User: user, Host: hosts[0], Path: path, RawQuery: q.Encode()}
		return v.String()
	}
	// Owned clients apply context deadlines to their reads and writes
	// (go-redis's default is not to), unless the URL says otherwise.
	ctxTimeouts := true
	if v, ok := q["context_timeout_enabled"]; ok {
		q.Del("context_timeout_enabled")
		b, err := strconv.ParseBool(v[len(v)-1])
		if err != nil {
			return bad("context_timeout_enabled=%q is not a boolean", v[len(v)-1])
		}
		ctxTimeouts = b
	}
	var rdb goredis.UniversalClient
	var desc string
	server := redisconn.Server
	server.Backend = "redis"
	switch kind {
	case "":
		if len(hosts) > 1 {
			return bad("%s:// takes one address; use %s+cluster:// or %s+sentinel:// for several", base, base, base)
		}
		o, err := goredis.ParseURL(rebuild(u.User, u.Path, q))
		if err != nil {
			return bad("%v", err)
		}
		o.ContextTimeoutEnabled = ctxTimeouts
		rdb = goredis.NewClient(o)
		desc = "redis " + o.Addr
		if o.DB != 0 {
			desc += "/" + strconv.Itoa(o.DB)
		}
	case "cluster":
		if u.Path != "" && u.Path != "/" {
			return bad("a cluster URL has no database path (got %q)", u.Path)
		}
		o, err := goredis.ParseClusterURL(rebuild(u.User, "", q))
		if err != nil {
			return bad("%v", err)
		}
		o.ContextTimeoutEnabled = ctxTimeouts
		rdb = goredis.NewClusterClient(o)
		desc = "redis cluster " + strings.Join(hosts, ",")
		server.Backend = "redis cluster"
	case "sentinel":
		parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
		if len(parts) < 1 || len(parts) > 2 {
			return bad("a sentinel URL needs the master's name as its path: %s://HOST:PORT/MASTER[/DB]", u.Scheme)
		}
		master := parts[0]
		if len(parts) == 2 {
			if _, err := strconv.Atoi(parts[1]); err != nil {
				return bad("invalid database number %q", parts[1])
			}
			q.Set("db", parts[1])
		}
		q.Set("master_name", master)
		sUser, sPass := q.Get("sentinel_username"), q.Get("sentinel_password")
		q.Del("sentinel_username")
		q.Del("sentinel_password")
		var su *url.Userinfo
		if sUser != "" || sPass != "" {
			su = url.UserPassword(sUser, sPass)
		}
		o, err := goredis.ParseFailoverURL(rebuild(su, "", q))
		if err != nil {
			return bad("%v", err)
		}
		if u.User != nil {
			o.Username = u.User.Username()
			o.Password, _ = u.User.Password()
		}
		o.ContextTimeoutEnabled = ctxTimeouts
		rdb = goredis.NewFailoverClient(o)
		desc = "redis sentinel " + master + " via " + strings.Join(hosts, ",")
		server.Backend = "redis sentinel " + master + " via"
	}
	b, err := New(rdb, append([]Option{Description(desc)}, opts...)...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	b.owned = true
	probe := new(connect.Probe)
	rdb.AddHook(redisconn.Probe(probe))
	ctx, cancel := connect.Bound(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		b.Close()
		if errors.Is(classify(err), ErrServerTooOld) {
			return nil, fmt.Errorf("%s: %w", desc, classify(err))
		}
		return nil, server.Explain(ctx, strings.Join(hosts, ","), probe, err)
	}
	probe.Done()
	if err := b.ready(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("%s: %w", desc, err)
	}
	return b, nil
}

// takeOptions removes dlock's options from q and returns them.
func takeOptions(q url.Values) ([]Option, error) {
	var opts []Option
	take := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			return "", false
		}
		q.Del(name)
		return v[len(v)-1], true
	}
	if v, ok := take("key_prefix"); ok {
		opts = append(opts, KeyPrefix(v))
	}
	if v, ok := take("waiter_timeout"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("waiter_timeout: %w", err)
		}
		opts = append(opts, WaiterTimeout(d))
	}
	n, hasN := take("wait_replicas")
	t, hasT := take("wait_replicas_timeout")
	if hasN {
		replicas, err := strconv.Atoi(n)
		if err != nil {
			return nil, fmt.Errorf("wait_replicas: %w", err)
		}
		timeout := time.Second
		if hasT {
			if timeout, err = time.ParseDuration(t); err != nil {
				return nil, fmt.Errorf("wait_replicas_timeout: %w", err)
			}
		}
		opts = append(opts, WaitReplicas(replicas, timeout))
	} else if hasT {
		return nil, errors.New("wait_replicas_timeout without wait_replicas")
	}
	return opts, nil
}
