package redis

import (
	"fmt"
	"time"
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
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	prefix         string
	waiterTimeout  time.Duration
	replicas       int
	replicaTimeout time.Duration
	desc           string
	errs           []string
}

func defaultConfig() config {
	return config{prefix: DefaultKeyPrefix, waiterTimeout: DefaultWaiterTimeout}
}

// KeyPrefix sets the prefix of the keys and channels the backend uses
// (default [DefaultKeyPrefix]); a lock called NAME is kept under
// PREFIX:{NAME} and a few keys next to it. Backends that share locks must
// use the same prefix. The prefix must be 1-64 bytes without braces, glob
// characters (* ? [ ] \) or control bytes.
func KeyPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if why := validPrefix(p); why != "" {
			c.errs = append(c.errs, fmt.Sprintf("key prefix %q %s", p, why))
			return
		}
		c.prefix = p
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
	return optionFunc(func(c *config) {
		if d < MinWaiterTimeout {
			c.errs = append(c.errs, fmt.Sprintf("waiter timeout %v is below the minimum %v", d, MinWaiterTimeout))
			return
		}
		c.waiterTimeout = d
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
// client's ReadTimeout. The option is not available on a Ring.
func WaitReplicas(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) {
		if n < 1 || timeout <= 0 {
			c.errs = append(c.errs, fmt.Sprintf("WaitReplicas(%d, %v): need at least 1 replica and a positive timeout", n, timeout))
			return
		}
		c.replicas, c.replicaTimeout = n, timeout
	})
}

// Description sets what [Backend.String] returns, which dlock puts into
// every error message (default: "redis" and the client's address). It must
// not contain secrets.
func Description(s string) Option {
	return optionFunc(func(c *config) { c.desc = s })
}
