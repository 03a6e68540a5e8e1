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
		l.cache("n", nil, gen, l.epochNow(), c.s, past)
		if _, ok := l.cached("n", gen, nil); ok != c.fresh {
			t.Errorf("%s: cached look served %v, want %v", c.what, ok, c.fresh)
		}
		if _, ok := l.cached("n", make(chan struct{}), nil); ok {
			t.Errorf("%s: a look of another feed generation was served", c.what)
		}
	}
}

// TestTurn: a turn told by the Feed wakes the fair waiter it names, and
// no other, to try without a look; and, named here or not, it makes every
// cached look stale, since the lock it names changed.
func TestTurn(t *testing.T) {
	l := NewLocal(nopFeed{})
	a := l.register("n", true, 7)
	defer l.unregister(a)
	b := l.register("n", true, 9)
	defer l.unregister(b)
	p := l.register("n", false, NoSeq)
	defer l.unregister(p)
	gen := make(chan struct{})
	free := lockState{head: NoSeq}
	cacheAndTurn := func(seq int64) {
		t.Helper()
		l.cache("n", nil, gen, l.epochNow(), free, time.Now())
		if _, ok := l.cached("n", gen, nil); !ok {
			t.Fatal("a fresh look was not served")
		}
		l.turn(seq)
		if _, ok := l.cached("n", gen, nil); ok {
			t.Errorf("turn(%d): a look taken before it was served", seq)
		}
	}
	chA, chB, chP := l.changed(a), l.changed(b), l.changed(p)
	cacheAndTurn(9)
	if !isClosed(chB) || !l.takeTurn(b) {
		t.Error("turn(9) did not wake waiter 9 to try")
	}
	if isClosed(chA) || isClosed(chP) || l.takeTurn(a) {
		t.Error("turn(9) woke another waiter")
	}
	cacheAndTurn(8) // not in this process
	if isClosed(chA) || isClosed(chP) {
		t.Error("turn(8) woke a waiter")
	}
	epoch := l.epochNow()
	l.turn(7)
	l.cache("n", nil, gen, epoch, free, time.Now())
	if _, ok := l.cached("n", gen, nil); ok {
		t.Error("a look taken before a turn was kept")
	}
	if !isClosed(chA) || !l.takeTurn(a) || l.takeTurn(a) {
		t.Error("turn(7) did not wake waiter 7 to try, once")
	}
	// A waiter that queued again is told its turns under its new sequence.
	l.consume(a, false)
	l.setSeq(a, 11)
	chA = l.changed(a)
	l.turn(7)
	if isClosed(chA) {
		t.Error("a turn of a waiter's old sequence woke it")
	}
	l.turn(11)
	if !isClosed(chA) {
		t.Error("a turn of a waiter's new sequence did not wake it")
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
