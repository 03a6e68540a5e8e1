package sqllock

import (
	"testing"
	"time"
)

// TestFairDelay checks the schedule of a fair waiter's looks without a
// Feed: 1/20 of the wait so far, within [fallbackMin, fallbackMax], never
// shorter for a longer wait.
func TestFairDelay(t *testing.T) {
	for _, c := range []struct{ waited, want time.Duration }{
		{0, fallbackMin},
		{50 * time.Millisecond, fallbackMin},
		{200 * time.Millisecond, 10 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
		{2 * time.Second, fallbackMax},
		{time.Hour, fallbackMax},
	} {
		if got := fairDelay(c.waited); got != c.want {
			t.Errorf("fairDelay(%v) = %v, want %v", c.waited, got, c.want)
		}
	}
	prev := time.Duration(0)
	for w := time.Duration(0); w < 3*time.Second; w += 7 * time.Millisecond {
		d := fairDelay(w)
		if d < prev || d < fallbackMin || d > fallbackMax {
			t.Fatalf("fairDelay(%v) = %v after %v", w, d, prev)
		}
		prev = d
	}
}
