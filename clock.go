package dlock

import "time"

// Clock is the client's source of time for lease deadlines and renewal
// timing. Implementations must return times that carry a monotonic reading
// (as time.Now does) so that wall-clock jumps do not move deadlines; tests
// may inject a clock that runs fast, slow or jumps.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After waits for the duration to elapse and then sends the current
	// time on the returned channel, like time.After.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// SystemClock returns the clock backed by the time package.
func SystemClock() Clock { return systemClock{} }
