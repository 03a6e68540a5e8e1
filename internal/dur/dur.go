// Package dur converts durations to the whole units stores keep (Redis PX
// milliseconds, SQL intervals, etcd lease seconds) without overflow.
package dur

import (
	"context"
	"math"
	"time"
)

// Ceil returns d in whole units, rounded up so that a store never keeps a
// lease shorter than the client assumes, and 0 for d <= 0. It cannot
// overflow: the usual (d + unit - 1) / unit wraps to a negative (and then,
// clamped, a 1 ms) TTL for d near math.MaxInt64, which let a second owner
// in at once.
func Ceil(d, unit time.Duration) int64 {
	if d <= 0 || unit <= 0 {
		return 0
	}
	q := int64(d / unit)
	if d%unit != 0 {
		q++
	}
	return q
}

// Sum returns a+b for non-negative durations, saturated at the largest
// Duration instead of wrapping to a negative one (a TTL near
// math.MaxInt64 plus a timeout).
func Sum(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// Sleep waits for d or until ctx is done, and then returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
