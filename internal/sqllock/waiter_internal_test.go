package sqllock

import (
	"context"
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

// nopFeed is a Feed that reports nothing.
type nopFeed struct{}

func (nopFeed) Subscribe(context.Context) (Subscription, error) { return nil, nil }
func (nopFeed) Close() error                                    { return nil }

// TestCachedLookGoesStale: a look shared by a process's waiters serves
// them only while what it says may still hold. An expiry is reported by
// no feed, so once the holder's lease or the first fair waiter's row may
// have run out, they must look again (else a fair waiter behind a
// waiter whose row ran out would take the same look over and over).
func TestCachedLookGoesStale(t *testing.T) {
	l := NewLocal(nopFeed{})
	s := l.register("n", true, 7)
	defer l.unregister(s)
	gen := make(chan struct{})
	past := time.Now().Add(-time.Second)
	for _, c := range []struct {
		what  string
		s     lockState
		fresh bool
	}{
		{"held, lease left", lockState{exists: true, owner: "o", holds: 1, remaining: time.Hour, head: NoSeq}, true},
		{"held, lease run out", lockState{exists: true, owner: "o", holds: 1, remaining: time.Second / 2, head: NoSeq}, false},
		{"queue, row left", lockState{head: 3, queueTTL: time.Hour}, true},
		{"queue, row run out", lockState{head: 3, queueTTL: time.Second / 2}, false},
		{"free, no queue", lockState{head: NoSeq}, true},
	} {
		l.cache("n", gen, c.s, past)
		if _, ok := l.cached("n", gen); ok != c.fresh {
			t.Errorf("%s: cached look served %v, want %v", c.what, ok, c.fresh)
		}
		if _, ok := l.cached("n", make(chan struct{})); ok {
			t.Errorf("%s: a look of another feed generation was served", c.what)
		}
	}
}
