package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
)

// Reply kinds of the acquire script.
const (
	kindHeld  = 0
	kindNew   = 1
	kindReent = 2
	kindStale = 3
	kindError = -1
)

// nodeRes is one master's answer to an acquisition attempt.
type nodeRes struct {
	i     int
	kind  int
	fence uint64 // the new fence (new), the fence that refused the proposal (stale), holder's fence (reentry, held)
	count int
	gid   string
	owner string        // holder when held
	ttl   time.Duration // holder's remaining lease when held
	err   error
	round int
}

// tryNode runs the acquire script with keys and args (the same for every
// master) on master i, bounded by ctx (the node timeout).
func (b *Backend) tryNode(ctx context.Context, i int, keys []string, args []any) nodeRes {
	r := nodeRes{i: i, kind: kindError}
	if b.closed.Load() {
		r.err = dlock.ErrClosed
		return r
	}
	v, err := b.run(ctx, i, acquireScript, keys, args...).Slice()
	if err != nil {
		if _, why, ok := strings.Cut(err.Error(), "DLOCKFOREIGN "); ok {
			// The script refused before any write.
			r.err = fmt.Errorf("%w: key %q on master %s holds data that dlock did not write (%s); nothing was changed",
				dlock.ErrForeignData, keys[0], b.addrs[i], why)
			return r
		}
		r.err = err
		return r
	}
	if len(v) == 2 {
		if k, _ := v[0].(int64); k == kindStale {
			fs, _ := v[1].(string)
			r.kind = kindStale
			r.fence, _ = strconv.ParseUint(fs, 10, 64)
			return r
		}
	}
	if len(v) != 4 {
		r.err = fmt.Errorf("unexpected reply %v", v)
		return r
	}
	k, _ := v[0].(int64)
	r.kind = int(k)
	fs, _ := v[2].(string)
	if r.kind != kindHeld {
		fs, _ = v[1].(string)
	}
	r.fence, _ = strconv.ParseUint(fs, 10, 64)
	switch r.kind {
	case kindHeld:
		r.owner, _ = v[1].(string)
		ms, _ := v[3].(int64)
		r.ttl = time.Duration(ms) * time.Millisecond
	case kindNew, kindReent:
		n, _ := v[2].(int64)
		r.count = int(n)
		r.gid, _ = v[3].(string)
	default:
		r.kind = kindError
		r.err = fmt.Errorf("unexpected reply %v", v)
	}
	return r
}

// Acquire makes one attempt on all masters in parallel; see
// [dlock.Backend] and the package documentation. It returns as soon as a
// quorum granted (and the grant's token was written to a quorum), without
// waiting for slower masters.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	mode, qid, ticket := modeTry, "", int64(0)
	var done *atomic.Bool
	if req.Wait {
		done = new(atomic.Bool)
		// A waiter keeps its place (queue id and ticket) over its
		// attempts; each attempt has an id of its own.
		mode, qid, ticket = modeWait, b.id+newID()[16:], time.Now().UnixMicro()
		if req.Fair {
			mode = modeFair
		}
	}
	var w *waiter
	armed := false
	if req.Wait && b.notices[0].waitedOn(req.Name) {
		// Where this Backend's waiters subscribed to the lock's channels
		// already, the waiter hears the notices from before its first
		// attempt, and need not make a second one at once.
		w = b.newWaiter(req, qid, mode, ticket, done)
		armed = w.tryAttach()
	}
	g, res, err := b.attempt(ctx, req, qid, mode, ticket, done)
	if err == nil {
		if w != nil {
			w.close()
		}
		return g, nil, nil
	}
	if !req.Wait || !errors.Is(err, dlock.ErrNotAcquired) || ctx.Err() != nil {
		if w != nil {
			w.close()
		}
		if qid != "" {
			done.Store(true)
			b.cancel(context.WithoutCancel(ctx), req.Name, qid)
		}
		return dlock.Grant{}, nil, err
	}
	if w == nil {
		w = b.newWaiter(req, qid, mode, ticket, done)
	}
	w.attempted(res)
	w.attach()
	w.first = !armed
	return dlock.Grant{}, w, err
}

// Modes of an attempt, as the acquire script takes them.
const (
	modeTry  = "t"
	modeWait = "w"
	modeFair = "f"
)

// waiterTimeout is how long a waiter keeps its place in the queues
// without an attempt; a waiter makes one at least every maxWait.
const waiterTimeout = 5 * time.Second

// cancel withdraws waiter qid from every master's queues.
func (b *Backend) cancel(ctx context.Context, name, qid string) error {
	keys, ch := b.keys(name), b.channel(name)
	_, _, failed := b.fanOut(ctx, len(b.nodes)+1, false, func(ctx context.Context, i int) (bool, error) {
		return true, b.run(ctx, i, cancelScript, keys, qid, ch, b.cfg.nodeTimeout.Milliseconds()).Err()
	})
	if len(failed) > 0 {
		return b.quorumError("cancel", len(b.nodes)-len(failed), failed)
	}
	return nil
}

// dequeue takes waiter qid out of master i's queues, passing on a promise
// of the lock or a release notice it had there (see lateLocked).
func (b *Backend) dequeue(i int, name, qid string) {
	ctx, cancel := b.nodeCtx(context.Background())
	defer cancel()
	b.run(ctx, i, cancelScript, b.keys(name), qid, b.channel(name), b.cfg.nodeTimeout.Milliseconds())
}

// attemptResult is what a failed attempt saw, for the waiter's timing.
type attemptResult struct {
	held  []nodeRes
	split bool // no owner held a quorum: contenders collided
	near  bool // in a split, this attempt got all but one of a quorum
}

func (b *Backend) attempt(ctx context.Context, req dlock.Request, qid, mode string, ticket int64, done *atomic.Bool) (dlock.Grant, attemptResult, error) {
	if b.closed.Load() {
		return dlock.Grant{}, attemptResult{}, fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	start := time.Now()
	n := len(b.nodes)
	a := &attempt{b: b, req: req, gid: newID(), qid: qid, owner: req.Owner, done: done, ch: make(chan nodeRes, n*maxRounds)}
	// Per-node calls do not end with ctx: a call cut short may still have
	// been granted, and its answer decides whether to give it back.
	nctx := context.WithoutCancel(ctx)
	// The proposed token: the local clock in µs, so that it is usually
	// above every master's fence and the grant takes one round trip. A
	// master whose fence is not below it refuses, and the next round
	// proposes above the highest fence seen. Safety does not depend on
	// the clock, only the number of rounds does.
	proposal := uint64(time.Now().UnixMicro())
	var granted, held, failed, stale []nodeRes
	var ctxErr error
	var quorum bool
	var nNew int
	keys := b.keys(req.Name)
	for round := 0; ; round++ {
		a.mu.Lock()
		a.maxP = max(a.maxP, proposal)
		a.mu.Unlock()
		args := []any{req.Owner, dur.Ceil(req.TTL, time.Millisecond), a.gid, mode, ticket, waiterTimeout.Milliseconds(), proposal, a.qid}
		rctx, done := b.roundCtx(nctx, n)
		for i := range n {
			b.bg.Add(1)
			b.spawn(i, func() {
				defer b.bg.Done()
				r := b.tryNode(rctx, i, keys, args)
				done()
				r.round = round
				a.mu.Lock()
				if a.state == statePending {
					a.ch <- r
					a.mu.Unlock()
					return
				}
				f := a.lateLocked(r)
				a.mu.Unlock()
				if f != nil {
					f()
				}
			})
		}
		granted, held, failed, stale = nil, nil, nil, nil
		got, nReent := 0, 0
		reentBy := map[uint64]int{} // reentries by the token of the hold
		nNew = 0
		// A grant needs a quorum of new grants, or of reentries of the
		// owner's hold; a mix of the two is the owner's other hold on a
		// minority (see complete).
		for nNew < b.quorum && nReent < b.quorum && max(nNew, nReent)+n-got >= b.quorum {
			select {
			case r := <-a.ch:
				if r.round != round {
					// An earlier round's answer: this round's request to
					// the same master answers for it (same attempt id).
					continue
				}
				got++
				switch r.kind {
				case kindNew:
					nNew++
					granted = append(granted, r)
				case kindReent:
					// Reentries count toward a quorum only with others of
					// the same hold (the same token): the owner may hold
					// the lock on some masters by another grant.
					reentBy[r.fence]++
					nReent = max(nReent, reentBy[r.fence])
					granted = append(granted, r)
				case kindHeld:
					held = append(held, r)
				case kindStale:
					stale = append(stale, r)
				default:
					failed = append(failed, r)
				}
			case <-ctx.Done():
				ctxErr = ctx.Err()
			}
			if ctxErr != nil {
				break
			}
		}
		quorum = nNew >= b.quorum || nReent >= b.quorum
		if ctxErr != nil || quorum || len(stale) == 0 || round+1 >= maxRounds ||
			nNew+len(stale)+n-got < b.quorum {
			break
		}
		for _, r := range stale {
			proposal = max(proposal, r.fence+1)
		}
	}
	var g dlock.Grant
	var err error
	if ctxErr == nil && quorum {
		g, err = b.complete(ctx, a, granted, proposal, start)
		if err == nil {
			if done != nil {
				done.Store(true)
			}
			a.decide(stateGranted, g.Token)
			return g, attemptResult{}, nil
		}
		held = nil // retry after a short random pause
	} else {
		switch {
		case ctxErr != nil:
			err = ctxErr
		case foreignIn(failed) != nil:
			// Foreign data on a master decides a failed attempt: waiting
			// would not make it go away.
			err = foreignIn(failed)
		case len(failed) > n-b.quorum:
			err = b.quorumError("acquire", len(granted), failed)
		case len(held) == 0:
			err = fmt.Errorf("%w: %d of %d masters granted, %d needed", dlock.ErrNotAcquired, len(granted), n, b.quorum)
		default:
			err = notAcquired(held, len(granted), b.quorum)
		}
	}
	// Give back at once everything the attempt may have got; masters that
	// answer later give back when they answer.
	pending := a.decide(stateFailed, 0)
	var wg sync.WaitGroup
	for _, r := range slices.Concat(granted, failed, stale, pending) {
		if r.kind == kindHeld || errors.Is(r.err, dlock.ErrForeignData) {
			continue // a refusal of foreign data wrote nothing
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.giveBack(r.i, a.giveBackOf(r))
		}()
	}
	wg.Wait()
	// Contenders collided only if this attempt got masters and gave them
	// back; one that got none waits for the notice of their give-back.
	res := splitInfo(held, b.quorum)
	res.split = res.split && len(granted) > 0
	res.near = res.split && nNew >= b.quorum-1
	return dlock.Grant{}, res, err
}

// foreignIn returns the error of the first master in failed that holds
// foreign data at the lock's key, or nil.
func foreignIn(failed []nodeRes) error {
	for _, r := range failed {
		if errors.Is(r.err, dlock.ErrForeignData) {
			return r.err
		}
	}
	return nil
}

// maxRounds bounds the rounds of one attempt whose proposed token was too
// low.
const maxRounds = 3

// decide ends the attempt's pending state and returns the answers that
// arrived but were not read; for a grant they are dealt with as late ones.
func (a *attempt) decide(state int, token uint64) []nodeRes {
	a.mu.Lock()
	a.state, a.token = state, token
	var rest []nodeRes
	var fs []func()
	for len(a.ch) > 0 {
		r := <-a.ch
		if state == stateGranted {
			if f := a.lateLocked(r); f != nil {
				fs = append(fs, f)
			}
		} else {
			rest = append(rest, r)
		}
	}
	a.mu.Unlock()
	for _, f := range fs {
		a.b.bg.Add(1)
		go func() {
			defer a.b.bg.Done()
			f()
		}()
	}
	return rest
}

// complete turns a quorum of grants into a Grant: a reentry returns the
// holder's token; a new hold takes the highest fence the granting masters
// reported plus one and writes it to them, and counts only if a quorum took
// it and validity remains.
func (b *Backend) complete(ctx context.Context, a *attempt, granted []nodeRes, proposal uint64, start time.Time) (dlock.Grant, error) {
	var reent []nodeRes
	for _, r := range granted {
		if r.kind == kindReent {
			reent = append(reent, r)
		}
	}
	var g dlock.Grant
	fenced := 0
	var toFence []nodeRes
	// The hold re-entered is the one a quorum of reentries share (its
	// token); a reentry of another hold of the owner on a minority is
	// undone, as in a new grant.
	by := map[uint64][]nodeRes{}
	var hold []nodeRes
	for _, r := range reent {
		by[r.fence] = append(by[r.fence], r)
		if len(by[r.fence]) >= b.quorum {
			hold = by[r.fence]
		}
	}
	if hold != nil {
		best := hold[0]
		a.reentry = true
		g = dlock.Grant{Token: best.fence, Count: 1, Handle: &handle{gid: best.gid, a: a}}
		for _, r := range hold {
			g.Count = max(g.Count, r.count)
		}
		fenced = len(hold)
		for _, r := range granted {
			switch {
			case r.kind == kindNew:
				toFence = append(toFence, r)
			case r.fence != best.fence:
				b.bg.Add(1)
				go func() {
					defer b.bg.Done()
					b.giveBack(r.i, a.giveBackOf(r))
				}()
			}
		}
	} else {
		// The masters that granted anew took the proposal as their fence
		// with the grant (those that granted in an earlier round take it
		// now). Masters where the owner holds otherwise (a hold of the
		// same owner being released, or one that lost its quorum) took
		// the request as a reentry of that hold; that is undone, and they
		// join this hold at its renewals once that one is gone.
		g = dlock.Grant{Token: proposal, Count: 1, Handle: &handle{gid: a.gid, a: a}}
		for _, r := range granted {
			switch {
			case r.kind == kindReent:
				b.bg.Add(1)
				go func() {
					defer b.bg.Done()
					b.giveBack(r.i, a.giveBackOf(r))
				}()
			case r.fence == proposal:
				fenced++
			default:
				toFence = append(toFence, r)
			}
		}
	}
	if len(toFence) > 0 {
		nctx := context.WithoutCancel(ctx)
		errs := make([]error, len(toFence))
		var wg sync.WaitGroup
		for j, r := range toFence {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = b.fenceNode(nctx, r.i, a.req.Name, a.owner, r.gid, a.qid, g.Token)
			}()
		}
		wg.Wait()
		var failed []nodeRes
		for j, err := range errs {
			if err == nil {
				fenced++
			} else {
				failed = append(failed, nodeRes{i: toFence[j].i, err: err})
			}
		}
		if fenced < b.quorum {
			// Not granted, but worth another attempt: a waiting Lock
			// tries again.
			return dlock.Grant{}, fmt.Errorf("%w: %w", dlock.ErrNotAcquired, b.quorumError("acquire (writing the token)", fenced, failed))
		}
	}
	if validity := a.req.TTL - time.Since(start) - b.drift(a.req.TTL); validity <= 0 {
		return dlock.Grant{}, fmt.Errorf("%w: the acquisition took %v of a %v TTL; no validity left",
			dlock.ErrNotAcquired, time.Since(start).Round(time.Millisecond), a.req.TTL)
	}
	return g, nil
}

// handle is a grant's Handle: the acquisition id that the masters store
// with the hold, and the attempt that got it, whose late answers must be
// given back once the hold is released.
type handle struct {
	gid string
	a   *attempt
}
