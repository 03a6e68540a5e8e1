package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/connect"
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
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	root           string
	sessionTimeout time.Duration
	loss           LossPolicy
	acl            []zk.ACL
	logger         *slog.Logger
	connectTimeout time.Duration
	errs           []string
}

func defaultConfig() config {
	return config{
		root:           DefaultRoot,
		sessionTimeout: DefaultSessionTimeout,
		acl:            zk.WorldACL(zk.PermAll),
		logger:         slog.Default(),
		connectTimeout: dlock.DefaultConnectTimeout,
	}
}

func (c *config) check() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", dlock.ErrInvalidOption, strings.Join(c.errs, "; "))
}

// Root sets the node under which the backend keeps its locks (default
// [DefaultRoot]): one container node per lock name below it. It must be an
// absolute ZooKeeper path; missing nodes on the way are created as
// persistent nodes. "/" is taken as the default.
func Root(path string) Option {
	return optionFunc(func(c *config) {
		if path == "" || path == "/" {
			c.root = DefaultRoot
			return
		}
		p := strings.TrimSuffix(path, "/")
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsRune(p, 0) {
			c.errs = append(c.errs, fmt.Sprintf("root %q is not an absolute ZooKeeper path", path))
			return
		}
		for _, part := range strings.Split(p[1:], "/") {
			if part == "." || part == ".." {
				c.errs = append(c.errs, fmt.Sprintf("root %q contains %q", path, part))
				return
			}
		}
		c.root = p
	})
}

// SessionTimeout sets the session timeout that Connect asks the servers for
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
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Sprintf("session timeout %v is not positive", d))
			return
		}
		c.sessionTimeout = d
	})
}

// ConnectTimeout bounds how long Connect waits for a session (default
// [dlock.DefaultConnectTimeout]; 0: only ctx bounds it).
func ConnectTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Sprintf("connect timeout %v is negative", d))
			return
		}
		c.connectTimeout = d
	})
}

// Loss sets which connection events end the leases of the session (default
// [LossOnSessionEnd]).
func Loss(p LossPolicy) Option {
	return optionFunc(func(c *config) {
		if p != LossOnSessionEnd && p != LossOnDisconnect {
			c.errs = append(c.errs, fmt.Sprintf("unknown loss policy %d", int(p)))
			return
		}
		c.loss = p
	})
}

// ACL sets the ACL of the nodes the backend creates (default: world, all
// permissions).
func ACL(acl []zk.ACL) Option {
	return optionFunc(func(c *config) {
		if len(acl) == 0 {
			c.errs = append(c.errs, "empty ACL")
			return
		}
		c.acl = acl
	})
}

// Logger sets where the backend and go-zookeeper log connection events,
// at debug level (default: slog.Default()).
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, "nil logger")
			return
		}
		c.logger = l
	})
}

// ParseURL returns the servers and options of a "zk" URL:
//
//	zk://host1:2181,host2:2181,host3:2181/chroot?session_timeout=10s&loss=disconnect
//
// Hosts without a port get 2181. The path is the Root (default
// [DefaultRoot]). Query parameters: session_timeout (a Go duration, see
// [SessionTimeout]), loss ("session", the default, or "disconnect"; see
// [LossPolicy]) and connect_timeout (see [dlock.DefaultConnectTimeout] and
// [ConnectTimeout]). User information and unknown parameters are refused with
// [dlock.ErrInvalidOption].
func ParseURL(u *url.URL) ([]string, []Option, error) {
	bad := func(format string, args ...any) ([]string, []Option, error) {
		return nil, nil, fmt.Errorf("%w: zookeeper URL %q: %s", dlock.ErrInvalidOption, u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Scheme != "zk" && u.Scheme != "zookeeper" {
		return bad("scheme must be zk")
	}
	if u.Opaque != "" {
		return bad("want zk://host:port[,host:port...]/root")
	}
	if u.User != nil {
		return bad("user information is not supported (use New with a connection that has AddAuth)")
	}
	if u.Fragment != "" {
		return bad("fragments are not supported")
	}
	var servers []string
	for _, h := range strings.Split(u.Host, ",") {
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
		return bad("no servers")
	}
	opts := []Option{Root(u.Path)}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	var errs []error
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "session_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("session_timeout: %v", err))
				continue
			}
			opts = append(opts, SessionTimeout(d))
		case connect.Param:
			d, err := connect.ParseTimeout(v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			opts = append(opts, ConnectTimeout(d))
		case "loss":
			switch v {
			case "session":
				opts = append(opts, Loss(LossOnSessionEnd))
			case "disconnect":
				opts = append(opts, Loss(LossOnDisconnect))
			default:
				errs = append(errs, fmt.Errorf("loss=%q: want session or disconnect", v))
			}
		default:
			errs = append(errs, fmt.Errorf("unknown parameter %q (known: session_timeout, loss, connect_timeout)", k))
		}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	errs = append(errs, cfg.check())
	if err := errors.Join(errs...); err != nil {
		return bad("%v", err)
	}
	return servers, opts, nil
}
