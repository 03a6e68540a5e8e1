package redlock

import (
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock"
)

// notAcquired is the error of an attempt that other holders refused.
func notAcquired(held []nodeRes, granted, quorum int) error {
	counts := map[string]int{}
	var top nodeRes
	for _, r := range held {
		counts[r.owner]++
		if counts[r.owner] > counts[top.owner] || top.owner == "" {
			top = r
		}
	}
	if top.owner == "" {
		return fmt.Errorf("%w: %d of %d masters needed granted", dlock.ErrNotAcquired, granted, quorum)
	}
	return &dlock.HeldError{Holder: dlock.Holder{Owner: top.owner, Token: top.fence, TTL: top.ttl}}
}

func splitInfo(held []nodeRes, quorum int) attemptResult {
	counts := map[string]int{}
	best := 0
	for _, r := range held {
		counts[r.owner]++
		best = max(best, counts[r.owner])
	}
	return attemptResult{held: held, split: best < quorum}
}

// QuorumError is the error of an operation that did not reach a quorum of
// the masters: it names the masters that failed and why. It matches
// [dlock.ErrNoQuorum] and [dlock.ErrBackendUnavailable].
type QuorumError struct {
	Op      string      // "acquire", "renew", "release"
	Got     int         // masters that did what was asked
	Quorum  int         // masters needed
	Masters int         // masters in all
	Failed  []NodeError // the masters that failed, in no particular order
}

// NodeError is the failure of one master.
type NodeError struct {
	Addr string
	Err  error
}

// Error lists the failed masters.
func (e *QuorumError) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s: %d of %d masters, %d needed", e.Op, e.Got, e.Masters, e.Quorum)
	for _, f := range e.Failed {
		fmt.Fprintf(&s, "; %s: %v", f.Addr, f.Err)
	}
	return s.String()
}

// Is matches dlock.ErrNoQuorum and dlock.ErrBackendUnavailable.
func (e *QuorumError) Is(target error) bool {
	return target == dlock.ErrNoQuorum || target == dlock.ErrBackendUnavailable
}

func (b *Backend) quorumError(op string, got int, failed []nodeRes) *QuorumError {
	e := &QuorumError{Op: op, Got: got, Quorum: b.quorum, Masters: len(b.nodes)}
	for _, r := range failed {
		e.Failed = append(e.Failed, NodeError{Addr: b.addrs[r.i], Err: r.err})
	}
	return e
}
