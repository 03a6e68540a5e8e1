package testserver

import "time"

// Option changes how a server is started. Options that do not apply to a
// server kind are ignored by it.
type Option func(*config)

type config struct {
	args              []string
	jvmProps          [][2]string
	zooCfg            [][2]string
	startTimeout      time.Duration
	sentinelDownAfter time.Duration
	isolate           bool
}

func newConfig(defaultTimeout time.Duration, opts []Option) *config {
	c := &config{startTimeout: defaultTimeout, sentinelDownAfter: 2 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// WithArgs appends extra command-line arguments: to redis-server (for
// example "--maxmemory", "10mb"), etcd (for example "--election-timeout",
// "500"; a repeated flag overrides the default), postgres (for example "-c",
// "max_connections=200") and mariadbd (for example "--max-connections=200").
// For ZooKeeper they are JVM arguments placed before the main class.
// In multi-node handles every node gets them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithJVMProperty sets a JVM system property (-Dname=value) for ZooKeeper,
// such as "znode.container.checkIntervalMs" (default here: 500) or
// "znode.container.maxNeverUsedIntervalMs". ZooKeeper reads these only as
// system properties, not from zoo.cfg. In an ensemble every node gets them.
func WithJVMProperty(name, value string) Option {
	return func(c *config) { c.jvmProps = append(c.jvmProps, [2]string{name, value}) }
}

// WithZooConfig sets a zoo.cfg entry, replacing the default for the same key
// (defaults: tickTime=200, minSessionTimeout=400, maxSessionTimeout=30000,
// 4lw.commands.whitelist=*, initLimit=25, syncLimit=10 and the directory and
// port entries, which should be left alone).
func WithZooConfig(key, value string) Option {
	return func(c *config) { c.zooCfg = append(c.zooCfg, [2]string{key, value}) }
}

// WithStartTimeout sets how long starting (and restarting) may take before
// the test fails. The defaults are 15 s for Redis and 30 s for the others.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.startTimeout = d
		}
	}
}

// WithSentinelDownAfter sets Sentinel's down-after-milliseconds for
// RedisSentinel (default 2 s). Failover starts about this long after the
// master dies.
func WithSentinelDownAfter(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.sentinelDownAfter = d
		}
	}
}

// T is what the package needs of a test: *testing.T and *testing.B have it,
// and so can a command that runs servers outside tests (dlock verify
// --local). Fatalf must not return (testing's stops the goroutine); Skip
// is called when a server binary is missing and must not return either.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
	Failed() bool
}
