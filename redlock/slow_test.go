package redlock

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestSlowOnly checks when an attempt's round that missed a quorum is
// made again: only when masters that did not answer in time could have
// made the quorum, and nobody else holds the lock.
func TestSlowOnly(t *testing.T) {
	slow := nodeRes{kind: kindError, err: context.DeadlineExceeded}
	ioSlow := nodeRes{kind: kindError, err: os.ErrDeadlineExceeded} // a net.Error that times out
	refused := nodeRes{kind: kindError, err: errors.New("connection refused")}
	held := nodeRes{kind: kindHeld}
	granted := nodeRes{kind: kindNew}
	for _, c := range []struct {
		name string
		rs   []nodeRes
		want bool
	}{
		{"all slow", []nodeRes{slow, slow, ioSlow, slow, slow}, true},
		{"two granted, rest slow", []nodeRes{granted, granted, slow, slow, slow}, true},
		{"one refused", []nodeRes{slow, slow, refused, slow, slow}, false},
		{"held somewhere", []nodeRes{held, slow, slow, slow, slow}, false},
		{"nothing failed", []nodeRes{granted, granted}, false},
		{"too few could answer", []nodeRes{slow, slow}, false},
	} {
		tl := &tally{reentBy: map[uint64]int{}}
		for _, r := range c.rs {
			tl.add(r)
		}
		if got := tl.slowOnly(3); got != c.want {
			t.Errorf("%s: slowOnly = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAdmission checks the bound on attempts under way: attempts beyond
// it wait in arrival order, an attempt answered late halves it, and one
// answered in time raises it by one.
func TestAdmission(t *testing.T) {
	var a admission
	ctx := context.Background()
	for range maxAttempts {
		if err := a.enter(ctx); err != nil {
			t.Fatal(err)
		}
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			a.enter(ctx)
			order <- i
		}()
		for {
			a.mu.Lock()
			n := len(a.queue)
			a.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	a.mu.Lock()
	second := a.queue[1]
	a.mu.Unlock()
	a.leave(true) // late: the bound halves, nobody gets in
	select {
	case i := <-order:
		t.Fatalf("attempt %d entered with %d under way and a bound of %d", i, maxAttempts-1, a.limit)
	case <-time.After(50 * time.Millisecond):
	}
	if a.limit != maxAttempts/2 {
		t.Fatalf("bound %d after a late attempt, want %d", a.limit, maxAttempts/2)
	}
	for len(a.queue) == 2 {
		a.leave(true)
	}
	if a.limit != minAttempts {
		t.Fatalf("bound %d when the first waiting attempt entered, want the floor %d", a.limit, minAttempts)
	}
	if a.queue[0] != second {
		t.Fatal("the second attempt to wait entered first")
	}
	for len(a.queue) > 0 {
		a.leave(false) // in time: the bound grows
	}
	<-order
	<-order
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for a.busy < a.limit {
		a.enter(ctx)
	}
	if err := a.enter(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("enter with an ended ctx at the bound: %v", err)
	}
	if len(a.queue) != 0 {
		t.Fatalf("%d left in the queue after a cancelled enter", len(a.queue))
	}
}
