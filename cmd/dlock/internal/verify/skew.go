package verify

import (
	"time"
)

// FaultSkew runs every other worker on a dlock Clock whose time passes at
// 1+Skew times the real rate (--skew, default −0.5%: slow, inside
// dlock's default Drift of 1%).
const FaultSkew = "skew"

// skewClock is a dlock.Clock that runs at rate times real time. Its times
// carry a monotonic reading (start.Add keeps it), as dlock needs.
type skewClock struct {
	start time.Time
	rate  float64
}

func newSkewClock(rate float64) *skewClock { return &skewClock{start: time.Now(), rate: rate} }

func (c *skewClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.rate))
}

func (c *skewClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(time.Duration(float64(d)/c.rate), func() { ch <- c.Now() })
	return ch
}

// untilReal converts a time on the skewed clock into real time from now.
func (c *skewClock) untilReal(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.Now())) / c.rate)
}
