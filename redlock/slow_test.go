package redlock

import (
	"context"
	"errors"
	"os"
	"testing"
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
