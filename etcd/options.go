package etcd

import (
	"crypto/tls"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/opt"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// An Option configures a Backend.
type Option interface{ opt.Option[config] }

type config struct {
	prefix         string
	connectTimeout time.Duration
	username       string
	password       string
	tls            *tls.Config
	logger         *zap.Logger
	dialOptions    []grpc.DialOption
	dialing        []string // the options given that only Open can use
	errs           opt.Problems
}

func newConfig(opts []Option) config {
	c := config{prefix: DefaultPrefix, connectTimeout: DefaultDialTimeout}
	opt.Apply(&c, opts)
	return c
}

// err reports the bad values, as one error matching
// [dlock.ErrInvalidOption]; nil if there are none.
func (c config) err() error { return c.errs.Err(dlock.ErrInvalidOption, "etcd") }

// dial returns an option that only Open can use, named name.
func dial(name string, f func(*config)) Option {
	return opt.Func[config](func(c *config) {
		c.dialing = append(c.dialing, name)
		f(c)
	})
}

// Prefix sets the key prefix under which the backend keeps its locks
// (default [DefaultPrefix]): the lock NAME lives under PREFIX/NAME/, with "%"
// and "/" in NAME escaped as %25 and %2F. Backends that share a prefix see
// the same locks. Leading and trailing slashes are dropped; an empty prefix
// means the default.
func Prefix(p string) Option {
	return opt.Func[config](func(c *config) {
		if p = strings.Trim(p, "/"); p != "" {
			c.prefix = p
		}
	})
}

// ConnectTimeout bounds how long Open waits for the cluster's first answer
// and each dial of the client (default [DefaultDialTimeout]; 0: only ctx
// bounds it). Open only.
func ConnectTimeout(d time.Duration) Option {
	return dial("ConnectTimeout", func(c *config) {
		if c.errs.Check(d >= 0, "connect timeout %v is negative", d) {
			c.connectTimeout = d
		}
	})
}

// Auth makes Open's client authenticate as user with password (etcd's
// role-based access control). Open only.
func Auth(user, password string) Option {
	return dial("Auth", func(c *config) {
		if c.errs.Check(user != "", "Auth with an empty user name") {
			c.username, c.password = user, password
		}
	})
}

// TLS makes Open's client talk to the endpoints over TLS with cfg (the
// endpoints are then https). Open only.
func TLS(cfg *tls.Config) Option {
	return dial("TLS", func(c *config) {
		if c.errs.Check(cfg != nil, "nil TLS config") {
			c.tls = cfg
		}
	})
}

// Logger sets the logger of Open's client (default: none). Open only.
func Logger(l *zap.Logger) Option {
	return dial("Logger", func(c *config) {
		if c.errs.Check(l != nil, "nil logger") {
			c.logger = l
		}
	})
}

// DialOptions adds gRPC dial options to Open's client, for example
// interceptors. Open only.
func DialOptions(opts ...grpc.DialOption) Option {
	return dial("DialOptions", func(c *config) {
		c.dialOptions = append(c.dialOptions, opts...)
	})
}
