package dlock

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-dev/dlock/internal/opt"
)

// Defaults and limits of the options.
const (
	// DefaultTTL is the lease TTL when no TTL option is given.
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL accepted: below it a renewal every TTL/3
	// cannot complete reliably within the lease.
	MinTTL = 100 * time.Millisecond
	// MaxTTL is the longest TTL accepted by a backend that does not state
	// its own maximum (see [TTLLimiter]). The TTL is how long a crashed
	// holder blocks its lock, not how long a job may run (a lease renews
	// itself, so a job of any length works with a short TTL); a day bounds
	// that damage while leaving room for any sane setting, and keeps every
	// store's unit conversion far from overflow.
	MaxTTL = 24 * time.Hour
	// DefaultDrift is the share of the TTL a lease's validity keeps in
	// reserve for clock drift between the client and the backend.
	DefaultDrift = 0.01
	// MaxNameLen is the longest lock name, in bytes.
	MaxNameLen = 255
	// MaxNamespaceLen is the longest key namespace, in bytes.
	MaxNamespaceLen = 64
)

// An Option configures a Client (given to [Open] or [New], where it sets the
// default for every Mutex) or a single Mutex (given to [Client.Mutex]).
// Options that only make sense for one of the two say so; given to the
// other, they are reported as [ErrInvalidOption].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// applyAll applies opts to c; a nil Option is recorded as a problem
// (reported as [ErrInvalidOption]) rather than a panic.
func (c *config) applyAll(opts []Option) {
	for i, o := range opts {
		if o == nil {
			c.errs.Check(false, "option %d of %d is nil", i+1, len(opts))
			continue
		}
		o.apply(c)
	}
}

// config is the resolved set of options of a Client or a Mutex.
type config struct {
	ttl       time.Duration
	owner     string
	fair      bool
	maxHold   time.Duration
	minHold   time.Duration
	clock     Clock
	logger    *slog.Logger
	namespace string
	drift     float64
	onWait    func(Holder)
	weight    int // a Semaphore's weight; 0 when not set
	tracer    Tracer

	// which client-only or mutex-only options were set, for validation.
	clientOnly []string
	mutexOnly  []string
	errs       opt.Problems
}

// TTL sets the lease time to live: how long the backend keeps the lock
// after the last renewal if the holder stops renewing (crashes). The client
// renews every TTL/3. The default is [DefaultTTL]; a TTL below [MinTTL]
// (including zero or negative) or above the backend's maximum (see
// [Client.MaxTTL]) is [ErrInvalidOption]. Backends with a coarser clock may
// round it up (etcd to whole seconds).
func TTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.errs.Check(d >= MinTTL, "TTL %v is below the minimum %v", d, MinTTL) {
			c.ttl = d
		}
	})
}

// Owner sets an explicit owner identity for a Mutex, which makes it
// reentrant: a Lock by the same owner while the lock is held by that owner
// succeeds at once with the same token and increments a hold count kept on
// the backend; the lock frees after as many Unlocks. Another process using
// the same owner id can re-enter too. Without Owner each acquisition gets a
// fresh random owner id and locks never nest. Owner is a Mutex option. An
// owner id follows the rule of names, on every backend: 1-255 bytes of
// valid UTF-8 without NUL; any other id is [ErrInvalidOption] and never
// reaches the backend.
func Owner(id string) Option {
	return mutexOption("Owner", func(c *config) {
		if msg := validName(id, MaxNameLen); c.errs.Check(msg == "", "owner %s %s", quoteCut(id), msg) {
			c.owner = id
		}
	})
}

// Fair makes waiters acquire the lock in the order they asked for it. A
// waiter that gives up (its context ends) leaves the queue at once and does
// not hold up those behind it. ZooKeeper and etcd are fair by construction;
// other backends keep a queue.
func Fair() Option {
	return optionFunc(func(c *config) { c.fair = true })
}

// MaxHold bounds how long a lease may be held: renewals never extend it
// past MaxHold after the grant, and at that moment the lease is lost (Done
// closes, its Context is cancelled) and released on the backend. Zero, the
// default, means no bound. A MaxHold below the TTL is [ErrInvalidOption].
func MaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.errs.Check(d >= 0, "MaxHold %v is negative", d) {
			c.maxHold = d
		}
	})
}

// MinHold keeps the name taken until d after the grant even if the lease
// is unlocked earlier (ShedLock's lockAtLeastFor): Unlock then leaves the
// hold in the store to expire there at that time, judged by the store's
// clock, with no process left running. A scheduled job that finishes early
// on one host thus is not run a second time by the same schedule on a host
// whose clock or timer is a little late. It needs a backend whose holds
// outlive the client (see [Detacher]: Redis, Redlock, the SQL lease
// tables, mem); elsewhere it is [ErrInvalidOption]. A reentrant hold's
// inner Unlocks release as usual. Zero, the default, means none; a MinHold
// above MaxHold is [ErrInvalidOption].
func MinHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.errs.Check(d >= 0, "MinHold %v is negative", d) {
			c.minHold = d
		}
	})
}

// WithClock sets the clock the client uses for lease deadlines and renewal
// timing (default: the system's monotonic clock). Tests use it to skew or
// jump time. It is a Client option.
func WithClock(clk Clock) Option {
	return clientOption("WithClock", func(c *config) {
		if c.errs.Check(clk != nil, "WithClock(nil)") {
			c.clock = clk
		}
	})
}

// WithLogger sets the logger for renewal errors and lost leases. Without
// it the library is silent: it never writes to slog.Default() on its own.
// It is a Client option.
func WithLogger(l *slog.Logger) Option {
	return clientOption("WithLogger", func(c *config) {
		if c.errs.Check(l != nil, "WithLogger(nil)") {
			c.logger = l
		}
	})
}

// Namespace puts every lock of the Client in a space of its own on the
// backend, so that several applications can share one store: the name
// "job" in namespace "app" is a different lock from "job" in another
// namespace, and from "app/job" or any other name without one. Names in
// errors, leases and Inspect are shown without it. It is a Client option;
// the prefix must be 1-64 bytes of valid UTF-8 without NUL or the byte
// 0x1F, which marks namespaced keys on the backend.
func Namespace(prefix string) Option {
	return clientOption("Namespace", func(c *config) {
		msg := validName(prefix, MaxNamespaceLen)
		if c.errs.Check(msg == "", "namespace %s", msg) &&
			c.errs.Check(strings.IndexByte(prefix, nsMark) < 0, "namespace contains the byte 0x1F") {
			c.namespace = prefix
		}
	})
}

// Drift sets the share of the TTL that a lease's validity keeps in reserve
// for the difference between the client's and the backend's clock rates
// (default [DefaultDrift], 1%): the lease is valid until the send time of
// the last successful renewal + TTL × (1 − drift). It must be in [0, 0.5).
// It is a Client option.
func Drift(f float64) Option {
	return clientOption("Drift", func(c *config) {
		if c.errs.Check(f >= 0 && f < 0.5, "drift %v is outside [0, 0.5)", f) {
			c.drift = f
		}
	})
}

// OnWait sets a function that Lock calls when it finds the lock held and
// starts (or goes on) waiting, each time the holder it learns of changes
// (another owner, or a new grant with another token). It is called only
// when the backend names the holder (a [*HeldError]).
// The CLI uses it to tell a person what they are waiting for. fn must not
// block.
func OnWait(fn func(Holder)) Option {
	return optionFunc(func(c *config) { c.onWait = fn })
}

// Weight sets the weight of each permit a [Semaphore] acquires: how much
// of its limit one lease holds (default 1). A weight below 1 or above the
// limit is [ErrInvalidOption], reported at once by Acquire rather than
// waited for forever. It is a Semaphore option.
func Weight(n int) Option {
	return mutexOption("Weight", func(c *config) {
		if c.errs.Check(n >= 1, "weight %d is below 1", n) {
			c.weight = n
		}
	})
}

// clientOption returns an Option, named name in errors, that only a Client
// takes.
func clientOption(name string, f func(*config)) Option {
	return optionFunc(func(c *config) {
		c.clientOnly = append(c.clientOnly, name)
		f(c)
	})
}

// mutexOption returns an Option, named name in errors, that only a Mutex
// takes.
func mutexOption(name string, f func(*config)) Option {
	return optionFunc(func(c *config) {
		c.mutexOnly = append(c.mutexOnly, name)
		f(c)
	})
}

// silent is the logger of a Client without WithLogger.
var silent = slog.New(slog.DiscardHandler)

func defaultConfig() config {
	return config{ttl: DefaultTTL, drift: DefaultDrift, clock: SystemClock(), logger: silent}
}

// validName returns why s is not a valid lock name of at most max bytes, or "".
func validName(s string, max int) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, longer than %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return "contains a NUL byte"
		}
	}
	return ""
}

// check reports the problems of a resolved configuration; client says
// whether it configures a Client (true) or a Mutex.
func (c *config) check(client bool) error {
	errs := slices.Clone(c.errs)
	if client && len(c.mutexOnly) > 0 {
		errs = append(errs, strings.Join(c.mutexOnly, ", ")+" is a Mutex option, not a Client option")
	}
	if !client && len(c.clientOnly) > 0 {
		errs = append(errs, strings.Join(c.clientOnly, ", ")+" is a Client option, not a Mutex option")
	}
	if c.maxHold > 0 && c.minHold > c.maxHold {
		errs = append(errs, fmt.Sprintf("MinHold %v is above MaxHold %v", c.minHold, c.maxHold))
	}
	if c.maxHold > 0 && c.maxHold < c.ttl {
		errs = append(errs, fmt.Sprintf("MaxHold %v is below the TTL %v", c.maxHold, c.ttl))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}
