package redlock

import (
	"fmt"
	"strings"
	"time"
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix      string
	nodeTimeout time.Duration
	drift       float64
	errs        []string
}

// Defaults.
const (
	DefaultKeyPrefix   = "dlock"
	DefaultNodeTimeout = 250 * time.Millisecond
	DefaultDriftFactor = 0.01
)

func defaultConfig() config {
	return config{prefix: DefaultKeyPrefix, nodeTimeout: DefaultNodeTimeout, drift: DefaultDriftFactor}
}

// KeyPrefix sets the prefix of the keys on the masters (default "dlock").
// A lock NAME is the hash PREFIX:{NAME} on every master.
func KeyPrefix(p string) Option {
	return func(c *config) {
		if p == "" || len(p) > 64 || strings.ContainsAny(p, "{}*?[]\\") {
			c.errs = append(c.errs, fmt.Sprintf("key prefix %q must be 1-64 bytes without braces or glob characters", p))
			return
		}
		c.prefix = p
	}
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
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Sprintf("node timeout %v is not positive", d))
			return
		}
		c.nodeTimeout = d
	}
}

// DriftFactor sets the allowance for the masters' clocks running fast
// relative to this process, as a fraction of the TTL (default 0.01); the
// validity of a grant is TTL − elapsed − (TTL×factor + 2ms).
func DriftFactor(f float64) Option {
	return func(c *config) {
		if f < 0 || f >= 0.5 {
			c.errs = append(c.errs, fmt.Sprintf("drift factor %v is not in [0, 0.5)", f))
			return
		}
		c.drift = f
	}
}

// encodeName escapes a lock name for use inside a hash tag: { } % and
// ASCII control bytes become %XX (the same encoding as package redis).
func encodeName(name string) string {
	esc := func(c byte) bool { return c == '{' || c == '}' || c == '%' || c < 0x20 || c == 0x7f }
	n := 0
	for i := 0; i < len(name); i++ {
		if esc(name[i]) {
			n++
		}
	}
	if n == 0 {
		return name
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if esc(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
