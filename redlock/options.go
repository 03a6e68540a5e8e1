package redlock

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/opt"
	"github.com/dlock-dev/dlock/internal/redisconn"
)

// An Option configures a [Backend].
type Option interface{ opt.Option[config] }

type config struct {
	prefix      string
	nodeTimeout time.Duration
	drift       float64
	logger      *slog.Logger
	errs        opt.Problems
	dial        dialConfig
}

// dialConfig is how [Open] makes the clients of the masters.
type dialConfig struct {
	set            []string // the names of the options given, for New's error
	user, password string
	db             int
	tls            bool
	tlsConfig      *tls.Config
	connectTimeout time.Duration
}

// dialOption is an Option that only [Open] takes.
func dialOption(name string, f func(*dialConfig)) Option {
	return opt.Func[config](func(c *config) {
		c.dial.set = append(c.dial.set, name)
		f(&c.dial)
	})
}

// Credentials sets the user name and password [Open] logs in to every
// master with (an empty user is the default user).
func Credentials(user, password string) Option {
	return dialOption("Credentials", func(d *dialConfig) { d.user, d.password = user, password })
}

// DB sets the database number [Open] selects on every master (default 0).
func DB(n int) Option {
	return opt.Func[config](func(c *config) {
		c.dial.set = append(c.dial.set, "DB")
		if c.errs.Check(n >= 0, "database number %d is negative", n) {
			c.dial.db = n
		}
	})
}

// TLS makes [Open] connect to the masters over TLS with cfg; a nil cfg
// verifies each master's certificate against its host name, with TLS 1.2
// or later.
func TLS(cfg *tls.Config) Option {
	return dialOption("TLS", func(d *dialConfig) { d.tls, d.tlsConfig = true, cfg })
}

// ConnectTimeout bounds how long [Open] waits for a quorum of masters to
// answer (default [dlock.DefaultConnectTimeout]; 0 leaves only the
// context of Open, which bounds it too).
func ConnectTimeout(d time.Duration) Option {
	return opt.Func[config](func(c *config) {
		c.dial.set = append(c.dial.set, "ConnectTimeout")
		if c.errs.Check(d >= 0, "connect timeout %v is negative", d) {
			c.dial.connectTimeout = d
		}
	})
}

// Defaults.
const (
	DefaultKeyPrefix   = "dlock"
	DefaultNodeTimeout = 250 * time.Millisecond
	DefaultDriftFactor = 0.01
)

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	c := config{prefix: DefaultKeyPrefix, nodeTimeout: DefaultNodeTimeout, drift: DefaultDriftFactor,
		dial: dialConfig{connectTimeout: dlock.DefaultConnectTimeout}}
	opt.Apply(&c, opts)
	return c
}

// KeyPrefix sets the prefix of the keys on the masters (default "dlock").
// A lock NAME is the hash PREFIX:{NAME} on every master.
func KeyPrefix(p string) Option {
	return opt.Func[config](func(c *config) {
		ok := p != "" && len(p) <= 64 && !strings.ContainsAny(p, "{}*?[]\\")
		if c.errs.Check(ok, "key prefix %q must be 1-64 bytes without braces or glob characters", p) {
			c.prefix = p
		}
	})
}

// NodeTimeout bounds each call to one master (default 250ms). Keep it
// much smaller than the TTL: an acquisition takes up to about twice this
// long when masters are slow, and that time comes off the validity. The
// default leaves room for a loaded machine: at 100ms, a 2-core machine
// busy with other work saw calls to healthy masters time out now and then,
// and each such timeout costs a master's vote. A master that does answer
// is not waited for longer than it takes; only a dead or paused one costs
// the whole timeout, and an acquisition returns at quorum without it.
func NodeTimeout(d time.Duration) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(d > 0, "node timeout %v is not positive", d) {
			c.nodeTimeout = d
		}
	})
}

// DriftFactor sets the allowance for the masters' clocks running fast
// relative to this process, as a fraction of the TTL (default 0.01); the
// validity of a grant is TTL − elapsed − (TTL×factor + 2ms).
func DriftFactor(f float64) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(f >= 0 && f < 0.5, "drift factor %v is not in [0, 0.5)", f) {
			c.drift = f
		}
	})
}

// encodeName escapes a lock name for use inside a hash tag, as the redis
// backend does (redisconn.EncodeName), so that both schemes name a lock's
// keys alike on one server.
func encodeName(name string) string { return redisconn.EncodeName(name) }

// Logger sets where the backend logs what a user should know, such as a
// set-up with fewer than three masters (default: none; the backend is
// silent, as the dlock library is without dlock.WithLogger).
func Logger(l *slog.Logger) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(l != nil, "nil logger") {
			c.logger = l
		}
	})
}
