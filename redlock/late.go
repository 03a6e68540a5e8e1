package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

// Attempt states.
const (
	statePending = iota
	stateGranted
	stateFailed
)

// Per-master release states of a granted attempt.
const (
	relNone   = iota // not released
	relSent          // the release is on its way to the master
	relFreed         // the master released it
	relMissed        // the master did not hold it when the release came
)

// attempt is one acquisition attempt across the masters. Masters that
// answer after the attempt was decided are dealt with in the background:
// a late grant of a failed attempt is given back, a late grant of a
// successful one is fenced while the hold lasts and given back once it was
// released.
type attempt struct {
	b     *Backend
	req   dlock.Request
	gid   string // unique to this attempt: the masters store it with the grant
	qid   string // the waiter's id in the queues ("" for a TryLock)
	owner string
	// done, shared by a waiter's attempts (nil for a TryLock), is set once
	// the waiter got its grant or withdrew: from then on, a late answer of
	// a failed attempt takes it out of that master's queues (lateLocked).
	done *atomic.Bool

	mu       sync.Mutex
	state    int
	token    uint64
	maxP     uint64 // the highest token proposed
	reentry  bool   // granted as a reentry of a hold that a quorum has
	released bool
	rel      []int8 // per master, once released
	relLate  []bool // per master: a grant answered while its release was under way
	ch       chan nodeRes
	maxTTL   atomic.Int64 // the longest TTL of a renewal of the hold
	late     bool         // a master did not answer a round in time (see admission)
}

// lateLocked deals with a master's answer r that came after the
// decision; it returns what to do about it, to be run without a.mu.
//
// The request may have queued the waiter on that master (it found the
// lock held or promised to another, or it is fair). The release of the
// waiter's hold, or its withdrawal, takes it out of every master's
// queues; but a request that the master executed after that would leave
// it there, a waiter that never tries, as the head that every release on
// that master promises the lock to (or, fair, the only one it may go to)
// until its deadline, and the next waiters could get only the other
// masters and split them. So a late answer that comes once the hold is
// being released (or, for a failed attempt, once the waiter got its grant
// or withdrew) takes the waiter out of that master's queues again,
// passing on whatever was promised to it. (An answer that comes before
// needs nothing: the release or withdrawal is sent after it.)
func (a *attempt) lateLocked(r nodeRes) func() {
	f := a.lateActionLocked(r)
	if f != nil || a.qid == "" || r.kind != kindHeld && r.kind != kindStale {
		// A grant (new or reentry) did not queue the waiter if it is not
		// fair, and if it is, its give-back or release takes it out.
		return f
	}
	if !(a.state == stateGranted && a.released || a.state == stateFailed && a.done != nil && a.done.Load()) {
		return nil
	}
	b := a.b
	return func() { b.dequeue(r.i, a.req.Name, a.qid) }
}

// lateActionLocked is lateLocked without the waiter's queues.
func (a *attempt) lateActionLocked(r nodeRes) func() {
	b := a.b
	switch {
	case errors.Is(r.err, dlock.ErrForeignData):
		return nil // the script refused before any write
	case a.state == stateFailed && r.kind != kindHeld:
		// A grant (or an answer lost on the way, which may hide one) of a
		// failed attempt: give it back.
		return func() { b.giveBack(r.i, a.giveBackOf(r)) }
	case a.state != stateGranted || (r.kind != kindNew && r.kind != kindReent):
		return nil
	case r.kind == kindReent && (!a.reentry || r.fence != a.token):
		// The owner's other hold on this master (one being released, or
		// one that lost its quorum) took the request as a reentry: undo
		// the increment, it is not part of this grant.
		return func() { b.giveBack(r.i, a.giveBackOf(r)) }
	case !a.released:
		if r.kind == kindNew && r.fence != a.token {
			return func() { b.fenceNode(context.Background(), r.i, a.req.Name, a.owner, r.gid, a.qid, a.token) }
		}
		return nil
	}
	// A grant of a hold that was released already.
	switch a.rel[r.i] {
	case relSent:
		a.relLate[r.i] = true // the release's answer decides
		return nil
	case relFreed:
		return nil // the grant came first and was released
	}
	return func() { b.giveBack(r.i, a.holdGiveBack(r.i)) }
}

// giveBackOf is the undoing of answer r of a failed attempt (once the
// waiter is done, it also takes the waiter out of that master's queues).
func (a *attempt) giveBackOf(r nodeRes) giveBack {
	gb := giveBack{name: a.req.Name, owner: a.owner, gid: a.gid, floor: strconv.FormatUint(a.maxP, 10), until: time.Now().Add(dur.Sum(a.req.TTL, a.b.cfg.nodeTimeout))}
	if a.done != nil && a.done.Load() {
		gb.qid = a.qid
	}
	if r.kind == kindReent {
		gb.token = strconv.FormatUint(r.fence, 10)
	}
	return gb
}

// holdGiveBack is the release of the attempt's grant on master i.
func (a *attempt) holdGiveBack(i int) giveBack {
	return giveBack{name: a.req.Name, owner: a.owner, token: strconv.FormatUint(a.token, 10), gid: a.gid, qid: a.qid,
		floor: strconv.FormatUint(a.token+1, 10), until: time.Now().Add(dur.Sum(a.req.TTL, a.b.cfg.nodeTimeout))}
}

// releasing marks the granted attempt's hold as released on every master
// and reports false if it was already.
func (a *attempt) releasing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return false
	}
	a.released = true
	a.rel = make([]int8, len(a.b.nodes))
	a.relLate = make([]bool, len(a.b.nodes))
	for i := range a.rel {
		a.rel[i] = relSent
	}
	return true
}

// releasedOn records the answer of master i to the release: freed, or not
// (missed). A grant that came while the release was under way and that
// the release missed is given back.
func (a *attempt) releasedOn(i int, freed bool) {
	a.mu.Lock()
	if a.rel == nil {
		a.mu.Unlock()
		return
	}
	late := a.relLate[i] && !freed
	if freed {
		a.rel[i] = relFreed
	} else {
		a.rel[i] = relMissed
	}
	a.mu.Unlock()
	if late {
		a.b.giveBack(i, a.holdGiveBack(i))
	}
}
