package zookeeper

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
	"github.com/dlock-dev/dlock/internal/opt"
	"github.com/dlock-dev/dlock/internal/urlq"
	"github.com/go-zookeeper/zk"
)

// Defaults of the options.
const (
	// DefaultRoot is the node under which lock nodes live when no Root
	// option (or URL path) is given.
	DefaultRoot = "/dlock"
	// DefaultSessionTimeout is the session timeout asked for when no
	// SessionTimeout option is given: dlock's default TTL, so that the
	// default TTL fits in the session.
	DefaultSessionTimeout = dlock.DefaultTTL
)

// LossPolicy says which connection events end the leases of a session; it
// is Curator's ConnectionStateErrorPolicy.
type LossPolicy int

const (
	// LossOnSessionEnd (the default) keeps leases through a disconnect and
	// ends them only when the session is, or may be, gone: ZooKeeper
	// reports it expired, a new session replaced it, or the session
	// timeout has run out since the last request the server answered
	// without the client having reconnected (Curator's
	// SessionConnectionStateErrorPolicy). A client that moves to another
	// server of the ensemble within the session timeout keeps its locks.
	LossOnSessionEnd LossPolicy = iota
	// LossOnDisconnect ends every lease of the session as soon as its
	// connection is lost (Curator's StandardConnectionStateErrorPolicy,
	// SUSPENDED counts as lost). Safer for work that must not run a
	// moment without a confirmed hold, at the price of losing locks on
	// every server restart or network blip. The lock nodes of such leases
	// are deleted when the session reconnects.
	LossOnDisconnect
)

// String returns "session" or "disconnect", the values of the URL's loss
// parameter.
func (p LossPolicy) String() string {
	if p == LossOnDisconnect {
		return "disconnect"
	}
	return "session"
}

// An Option configures a Backend.
type Option interface{ opt.Option[config] }

type config struct {
	root           string
	sessionTimeout time.Duration
	loss           LossPolicy
	acl            []zk.ACL
	logger         *slog.Logger
	connectTimeout time.Duration
	errs           opt.Problems
}

// newConfig returns the configuration opts make; see [config.err].
func newConfig(opts []Option) config {
	c := config{
		root:           DefaultRoot,
		sessionTimeout: DefaultSessionTimeout,
		acl:            zk.WorldACL(zk.PermAll),
		logger:         slog.New(slog.DiscardHandler),
		connectTimeout: dlock.DefaultConnectTimeout,
	}
	opt.Apply(&c, opts)
	return c
}

// err reports the bad values, as one error matching
// [dlock.ErrInvalidOption] that names each; nil if there are none.
func (c config) err() error { return c.errs.Err(dlock.ErrInvalidOption, "zookeeper") }

// Root sets the node under which the backend keeps its locks (default
// [DefaultRoot]): one container node per lock name below it. It must be an
// absolute ZooKeeper path; missing nodes on the way are created as
// persistent nodes. "/" is taken as the default.
func Root(path string) Option {
	return opt.Func[config](func(c *config) {
		if path == "" || path == "/" {
			c.root = DefaultRoot
			return
		}
		p := strings.TrimSuffix(path, "/")
		abs := strings.HasPrefix(p, "/") && !strings.Contains(p, "//") && !strings.ContainsRune(p, 0)
		if !c.errs.Check(abs, "root %q is not an absolute ZooKeeper path", path) {
			return
		}
		for _, part := range strings.Split(p[1:], "/") {
			if !c.errs.Check(part != "." && part != "..", "root %q contains %q", path, part) {
				return
			}
		}
		c.root = p
	})
}

// SessionTimeout sets the session timeout that Open asks the servers for
// (default [DefaultSessionTimeout]). The servers clamp it to their
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 tickTimes);
// the backend uses the value they grant.
//
// The granted timeout bounds every lease of the backend: a TTL (or an
// Extend) longer than it is refused with [dlock.ErrInvalidOption], because
// after a disconnect ZooKeeper may delete the lock nodes one session
// timeout after it last heard from the client. A shorter TTL is kept by
// the backend itself while the process lives: a hold that is not renewed
// within its TTL is released. A process that dies (or loses its
// connection for good) frees its locks after the session timeout.
//
// With [New], the session timeout of the connection the caller built
// cannot be seen: give the value the servers grant with this option.
func SessionTimeout(d time.Duration) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(d > 0, "session timeout %v is not positive", d) {
			c.sessionTimeout = d
		}
	})
}

// ConnectTimeout bounds how long Open waits for a session (default
// [dlock.DefaultConnectTimeout]; 0: only ctx bounds it).
func ConnectTimeout(d time.Duration) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(d >= 0, "connect timeout %v is negative", d) {
			c.connectTimeout = d
		}
	})
}

// Loss sets which connection events end the leases of the session (default
// [LossOnSessionEnd]).
func Loss(p LossPolicy) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(p == LossOnSessionEnd || p == LossOnDisconnect, "unknown loss policy %d", int(p)) {
			c.loss = p
		}
	})
}

// ACL sets the ACL of the nodes the backend creates (default: world, all
// permissions).
func ACL(acl []zk.ACL) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(len(acl) > 0, "empty ACL") {
			c.acl = acl
		}
	})
}

// Logger sets where the backend and go-zookeeper log connection events,
// at debug level (default: none; the backend is silent, as the dlock
// library is without dlock.WithLogger).
func Logger(l *slog.Logger) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(l != nil, "nil logger") {
			c.logger = l
		}
	})
}

// ParseURL returns the servers and options of a "zk" (or "zookeeper") URL:
//
//	zk://host1:2181,host2:2181,host3:2181/chroot?session_timeout=10s&loss=disconnect
//
// Hosts without a port get 2181. The path is the [Root] (default
// [DefaultRoot]). Query parameters: session_timeout (a Go duration, see
// [SessionTimeout]), loss ("session", the default, or "disconnect"; see
// [LossPolicy]) and connect_timeout (see [ConnectTimeout]). User
// information, a repeated or unknown parameter and a bad value are refused
// with [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) (addr string, opts []Option, err error) {
	q := urlq.Parse("zookeeper", u)
	switch {
	case u.Scheme != "zk" && u.Scheme != "zookeeper":
		return "", nil, q.Errorf("scheme must be zk")
	case u.Opaque != "":
		return "", nil, q.Errorf("want zk://host:port[,host:port...]/root")
	case u.User != nil:
		return "", nil, q.Errorf("user information is not supported (use New with a connection that has AddAuth)")
	case u.Fragment != "":
		return "", nil, q.Errorf("fragments are not supported")
	}
	servers, err := splitServers(u.Host)
	if err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	opts = []Option{Root(u.Path)}
	urlq.Add(&opts, "session_timeout", q.Duration, SessionTimeout)
	urlq.Add(&opts, connect.Param, urlq.ParsedBy(q, connect.ParseTimeout), ConnectTimeout)
	urlq.Add(&opts, "loss", urlq.ParsedBy(q, parseLoss), Loss)
	if _, err := q.Done(nil); err != nil {
		return "", nil, err
	}
	if err := newConfig(opts).err(); err != nil {
		return "", nil, q.Errorf("%v", err)
	}
	return strings.Join(servers, ","), opts, nil
}

// parseLoss parses the loss parameter: the String of a [LossPolicy].
func parseLoss(s string) (LossPolicy, error) {
	for _, p := range []LossPolicy{LossOnSessionEnd, LossOnDisconnect} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("want %s or %s", LossOnSessionEnd, LossOnDisconnect)
}

// splitServers splits a comma list of servers; a server without a port
// gets 2181.
func splitServers(addr string) ([]string, error) {
	var servers []string
	for _, h := range strings.Split(addr, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if !strings.Contains(h, ":") || strings.HasPrefix(h, "[") && !strings.Contains(h, "]:") {
			h += ":2181"
		}
		servers = append(servers, h)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("no servers")
	}
	return servers, nil
}
