package redlock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	goredis "github.com/redis/go-redis/v9"
)

// A release passes the lock on in the same round trip when a fair waiter
// of this process (of any Backend on the same masters, in the same order,
// with the same key prefix) waits for it: the release's request to each
// master is followed, in one pipeline, by that waiter's next attempt, which
// the master runs right after the release. The attempt is the waiter's
// own, as it would make it on the release's notices (its acquisition id,
// proposal, quorum and validity, counted from before the requests were
// sent); only the sending moves, which saves the waiter the wait for a
// quorum of notices and a second round trip. The masters still decide: a
// master whose fair queue has another head (a waiter of another process
// that came first) refuses the attempt, as it would refuse it later, and
// the waiter goes back to waiting.

// parkedSet is the fair waiters of this process that wait for a release
// notice (in Wait), by masters and name (see parkKey).
type parkedSet struct {
	mu sync.Mutex
	by map[string][]*waiter
}

var parked = parkedSet{by: map[string][]*waiter{}}

// handed is an attempt that a release sent for a parked waiter.
type handed struct {
	a        *attempt
	proposal uint64
	start    time.Time
}

// mastersKey identifies the masters of b (address and database of each,
// in order) and its key prefix: Backends with the same one keep a name's
// lock in the same keys.
func mastersKey(b *Backend) string {
	var sb strings.Builder
	sb.WriteString(b.cfg.prefix)
	for _, c := range b.nodes {
		o := c.Options()
		sb.WriteString("\x00")
		sb.WriteString(masterKey(o))
		sb.WriteString("/")
		sb.WriteString(strconv.Itoa(o.DB))
	}
	return sb.String()
}

func (b *Backend) parkKey(name string) string { return b.masters + "\x00" + name }

// park makes w, a fair waiter in Wait, one that a release may send an
// attempt for.
func (w *waiter) park() {
	w.parkedAt = w.b.parkKey(w.req.Name)
	parked.mu.Lock()
	parked.by[w.parkedAt] = append(parked.by[w.parkedAt], w)
	parked.mu.Unlock()
}

// unpark ends w's park; if a release took w meanwhile, the attempt it sent
// becomes w's pending one.
func (w *waiter) unpark() {
	if w.parkedAt == "" {
		return
	}
	key := w.parkedAt
	w.parkedAt = ""
	parked.mu.Lock()
	ws := parked.by[key]
	for i, o := range ws {
		if o == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			if len(ws) == 0 {
				delete(parked.by, key)
			} else {
				parked.by[key] = ws
			}
			parked.mu.Unlock()
			return
		}
	}
	parked.mu.Unlock()
	// Taken: the release put its attempt in w.handed before it let go of
	// parked.mu.
	w.pending = <-w.handed
}

// passing is the attempt a release sends along for a parked waiter.
type passing struct {
	a    *attempt
	key  string
	full []any
}

// takeParked takes the parked waiter of name that came first (the lowest
// ticket, the head of the masters' fair queues if it is anyone's) and
// makes its attempt, or returns nil.
func (b *Backend) takeParked(name string) *passing {
	key := b.parkKey(name)
	parked.mu.Lock()
	defer parked.mu.Unlock()
	ws := parked.by[key]
	if len(ws) == 0 {
		return nil
	}
	j := 0
	for i, w := range ws {
		if w.ticket < ws[j].ticket {
			j = i
		}
	}
	w := ws[j]
	ws = append(ws[:j:j], ws[j+1:]...)
	if len(ws) == 0 {
		delete(parked.by, key)
	} else {
		parked.by[key] = ws
	}
	a := w.b.newAttempt(w.req, w.qid, w.done)
	h := &handed{a: a, proposal: uint64(time.Now().UnixMicro()), start: time.Now()}
	a.maxP = h.proposal
	keys := w.b.keys(w.req.Name)
	p := &passing{a: a, key: keys[0], full: a.command(keys, w.mode, w.ticket, h.proposal)}
	w.handed <- h // capacity 1, and w is taken once per park
	b.passed.Add(1)
	return p
}

// releasePassing releases hold h on master i with gb, as releaseOn does,
// and sends the attempt of p after it in the same pipeline.
func (b *Backend) releasePassing(ctx context.Context, i int, h dlock.Hold, gb giveBack, p *passing) (bool, error) {
	// The release does not notify the waiter whose attempt follows it.
	rel := &call{s: releaseScript, full: append(slices.Clip(gb.full), p.a.qid)}
	acq := &call{s: acquireScript, full: p.full}
	c := b.conduits[i].c
	pipe := c.Pipeline()
	rel.cmd, acq.cmd = pipe.Do(ctx, rel.command()...), pipe.Do(ctx, acq.command()...)
	pipe.Exec(ctx)
	// A master that does not have a script yet: the attempt must come
	// after the release, so a release that did not run goes again (as
	// EVAL) with the attempt after it (the attempt, if it ran, found the
	// lock held: the same acquisition asks again).
	switch {
	case noScript(rel.cmd.Err()):
		pipe = c.Pipeline()
		rel.cmd = pipe.Do(ctx, rel.evalCommand()...)
		if noScript(acq.cmd.Err()) {
			acq.cmd = pipe.Do(ctx, acq.evalCommand()...)
		} else {
			acq.cmd = pipe.Do(ctx, acq.command()...)
		}
		pipe.Exec(ctx)
	case noScript(acq.cmd.Err()):
		acq.cmd = c.Do(ctx, acq.evalCommand()...)
	}
	ok, err := releaseReply(rel.cmd)
	b.releasedOn(i, h, gb, ok, err)
	p.a.deliver(p.a.b.nodeResult(i, p.key, acq.cmd), 0)
	return ok, err
}

// handedAttempt finishes the attempt a release sent for w.
func (w *waiter) handedAttempt(ctx context.Context, h *handed) (dlock.Grant, attemptResult, error) {
	t, proposal := h.a.rounds(ctx, w.mode, w.ticket, h.proposal, true)
	g, res, err := w.b.decideAttempt(ctx, h.a, t, proposal, h.start)
	if err == nil {
		w.b.handedWon.Add(1)
	}
	return g, res, err
}

func noScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }
