package redis

import (
	"crypto/tls"
	"net/url"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/opt"
)

// Defaults of the options.
const (
	// DefaultKeyPrefix is the prefix of every key the backend writes.
	DefaultKeyPrefix = "dlock"
	// DefaultWaiterTimeout is how long a fair waiter stays in a lock's queue
	// without showing that it is alive; see [WaiterTimeout].
	DefaultWaiterTimeout = 5 * time.Second
	// MinWaiterTimeout is the shortest waiter timeout accepted.
	MinWaiterTimeout = 300 * time.Millisecond
)

// An Option configures a [Backend].
type Option interface{ opt.Option[config] }

type config struct {
	prefix         string
	waiterTimeout  time.Duration
	replicas       int
	replicaTimeout time.Duration
	clockTokens    bool // see ClockTokens (default true)
	desc           string
	errs           opt.Problems
	dial           dialConfig
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	c := config{prefix: DefaultKeyPrefix, waiterTimeout: DefaultWaiterTimeout, clockTokens: true,
		dial: dialConfig{connectTimeout: dlock.DefaultConnectTimeout}}
	opt.Apply(&c, opts)
	return c
}

// KeyPrefix sets the prefix of the keys and channels the backend uses
// (default [DefaultKeyPrefix]); a lock called NAME is kept under
// PREFIX:{NAME} and a few keys next to it. Backends that share locks must
// use the same prefix. The prefix must be 1-64 bytes without braces, glob
// characters (* ? [ ] \) or control bytes.
func KeyPrefix(p string) Option {
	return opt.Func[config](func(c *config) {
		if why := validPrefix(p); c.errs.Check(why == "", "key prefix %q %s", p, why) {
			c.prefix = p
		}
	})
}

// WaiterTimeout sets how long a waiter of a [dlock.Fair] lock keeps its
// place in the lock's queue on the server without a sign of life (default
// [DefaultWaiterTimeout]). A waiting Lock shows it is alive by retrying at
// least every third of this time, so a waiter whose process died holds up
// the queue for at most this long; a waiter that gives up (its context
// ends) leaves the queue at once. A waiter that was paused (GC, SIGSTOP)
// for longer loses its place and queues again at the end. Values below
// [MinWaiterTimeout] are an error.
func WaiterTimeout(d time.Duration) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(d >= MinWaiterTimeout, "waiter timeout %v is below the minimum %v", d, MinWaiterTimeout) {
			c.waiterTimeout = d
		}
	})
}

// WaitReplicas makes every grant and renewal wait, with Redis's WAIT
// command, until n replicas of the master have acknowledged it, for at most
// timeout. A grant that is not acknowledged in time is given back and the
// acquisition fails with an error matching [dlock.ErrBackendUnavailable]; a
// renewal that is not acknowledged counts as failed (the lease keeper
// retries it until the lease's deadline). The acquisition and WAIT travel
// in one pipeline, so this costs no extra round trip, but each grant waits
// for the slowest of the n replicas.
//
// WAIT is not consensus. It narrows the window in which a failover loses a
// grant, but does not close it: Redis may still promote a replica that had
// not received the write (Sentinel and Cluster prefer the most up-to-date
// replica, but do not guarantee it), a write that WAIT reports as
// unacknowledged may nonetheless survive, and an acknowledged write lives
// only in the replicas' memory. Fencing tokens remain what makes writes to
// the protected resource safe.
//
// n must be at least 1 and timeout positive; keep timeout below the go-redis
// client's ReadTimeout.
func WaitReplicas(n int, timeout time.Duration) Option {
	return opt.Func[config](func(c *config) {
		if c.errs.Check(n >= 1 && timeout > 0, "WaitReplicas(%d, %v): need at least 1 replica and a positive timeout", n, timeout) {
			c.replicas, c.replicaTimeout = n, timeout
		}
	})
}

// ClockTokens sets whether every grant's fencing token is at least the
// server's time in µs: max(fence+1, time). It is on by default, on every
// topology (a single address, Sentinel, Cluster, and [New] on any client),
// because no client can tell whether the address it dials may move to a
// replica: a managed service's primary endpoint does so on failover, and
// Redis replication is asynchronous, so the new primary's fence may lack
// the last grants. Clock tokens keep increasing across such a failover,
// and across a restart without persistence, as long as the servers' clocks
// agree to better than the time between the lost grant and the next grant
// (a failover takes seconds to detect, so a clock kept by NTP is well
// inside that); a clock that steps back on one server cannot make tokens
// go back, since a token is never below the fence plus one.
//
// ClockTokens(false), or clock_tokens=false in a URL, is the opt-out for
// speed: an uncontended grant then takes fence+1 by INCR without reading
// the clock, which costs the server less per grant (BenchmarkClockTokens
// and BenchmarkScriptCPU measure it). Tokens still increase for the life
// of the store's data, and start again at the server's time when the fence
// key is missing, but after a failover to a replica whose fence is behind
// the next grant may repeat a token that a paused holder still carries, and
// a fenced resource then accepts both. Opt out only for a server that never
// fails over to a replica (no replicas, or none promoted behind the same
// address).
func ClockTokens(on bool) Option {
	return opt.Func[config](func(c *config) { c.clockTokens = on })
}

// Description sets what [Backend.String] returns, which dlock puts into
// every error message (default: "redis" and the client's address). It must
// not contain secrets.
func Description(s string) Option {
	return opt.Func[config](func(c *config) { c.desc = s })
}

// dialConfig is how [Open] makes its client.
type dialConfig struct {
	set            []string // the names of the options given, for New's error
	user, password string
	db             int
	sentinel       string // the master's name: addr lists Sentinels
	sUser, sPass   string // the Sentinels' own credentials
	cluster        bool
	tls            bool
	tlsConfig      *tls.Config
	connectTimeout time.Duration
	params         url.Values // go-redis's URL parameters, by name
	noCtxTimeouts  bool       // context_timeout_enabled=false
}

// dialOption is an Option that only [Open] takes.
func dialOption(name string, f func(*config)) Option {
	return opt.Func[config](func(c *config) {
		c.dial.set = append(c.dial.set, name)
		f(c)
	})
}

// Credentials sets the user name and password [Open] logs in to the data
// nodes with (an empty user is the default user).
func Credentials(user, password string) Option {
	return dialOption("Credentials", func(c *config) { c.dial.user, c.dial.password = user, password })
}

// DB sets the database number [Open] selects (default 0); a Cluster has
// only database 0.
func DB(n int) Option {
	return dialOption("DB", func(c *config) {
		if c.errs.Check(n >= 0, "database number %d is negative", n) {
			c.dial.db = n
		}
	})
}

// Sentinel makes [Open] find the master named master through the
// Sentinels that its addr lists (default port 26379).
func Sentinel(master string) Option {
	return dialOption("Sentinel", func(c *config) {
		if c.errs.Check(master != "", "empty Sentinel master name") {
			c.dial.sentinel = master
		}
	})
}

// SentinelCredentials sets the Sentinels' own user name and password, for
// [Sentinel]; the data nodes' are [Credentials].
func SentinelCredentials(user, password string) Option {
	return dialOption("SentinelCredentials", func(c *config) { c.dial.sUser, c.dial.sPass = user, password })
}

// Cluster makes [Open] connect to a Redis Cluster through the nodes its
// addr lists.
func Cluster() Option {
	return dialOption("Cluster", func(c *config) { c.dial.cluster = true })
}

// TLS makes [Open] connect over TLS with cfg; a nil cfg verifies each
// server's certificate against its host name, with TLS 1.2 or later.
func TLS(cfg *tls.Config) Option {
	return dialOption("TLS", func(c *config) { c.dial.tls, c.dial.tlsConfig = true, cfg })
}

// ConnectTimeout bounds how long [Open] waits for the server to answer
// (default [dlock.DefaultConnectTimeout]; 0 leaves only the context of
// Open, which bounds it too).
func ConnectTimeout(d time.Duration) Option {
	return dialOption("ConnectTimeout", func(c *config) {
		if c.errs.Check(d >= 0, "connect timeout %v is negative", d) {
			c.dial.connectTimeout = d
		}
	})
}

// contextTimeouts sets go-redis's ContextTimeoutEnabled of the client
// [Open] makes (default true), for a URL's context_timeout_enabled.
func contextTimeouts(on bool) Option {
	return dialOption("context_timeout_enabled", func(c *config) { c.dial.noCtxTimeouts = !on })
}

// clientParams passes go-redis's URL parameters (dial_timeout, pool_size,
// ...) to the client [Open] makes; [ParseURL] checked them.
func clientParams(v url.Values) Option {
	return dialOption("go-redis parameters", func(c *config) { c.dial.params = v })
}
