package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	goredis "github.com/redis/go-redis/v9"
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

// foreign returns the error of a script on master i that refused, before
// any write, to touch key because it holds foreign data (DLOCKFOREIGN);
// any other error is returned as it is.
func (b *Backend) foreign(err error, key string, i int) error {
	if _, why, ok := strings.Cut(err.Error(), "DLOCKFOREIGN "); ok {
		return fmt.Errorf("%w: key %q on master %s holds data that dlock did not write (%s); nothing was changed",
			dlock.ErrForeignData, key, b.addrs[i], why)
	}
	return err
}

// tryNode runs the acquire script's command full (see evalArgs; the same
// for every master) for the lock hash key on master i, bounded by ctx (the
// node timeout).
func (b *Backend) tryNode(ctx context.Context, i int, key string, full []any) nodeRes {
	r := nodeRes{i: i, kind: kindError}
	if b.closed.Load() {
		r.err = dlock.ErrClosed
		return r
	}
	return b.nodeResult(i, key, b.runEval(ctx, i, acquireScript, full))
}

// nodeResult reads master i's answer cmd to the acquire script for the
// lock hash key.
func (b *Backend) nodeResult(i int, key string, cmd *goredis.Cmd) nodeRes {
	r := nodeRes{i: i, kind: kindError}
	v, err := cmd.Slice()
	if err != nil {
		r.err = b.foreign(err, key, i)
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
	free  []int // masters that answered and that no other owner held
	split bool  // no owner held a quorum: contenders collided
	near  bool  // in a split, this attempt got all but one of a quorum
}

// attempt makes one acquisition attempt on every master: rounds of the
// acquire script until a quorum granted or cannot, then complete on a
// quorum, or give back whatever was got.
func (b *Backend) attempt(ctx context.Context, req dlock.Request, qid, mode string, ticket int64, done *atomic.Bool) (dlock.Grant, attemptResult, error) {
	if b.closed.Load() {
		return dlock.Grant{}, attemptResult{}, fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	if err := b.admission.enter(ctx); err != nil {
		return dlock.Grant{}, attemptResult{}, err
	}
	start := time.Now()
	a := b.newAttempt(req, qid, done)
	t, proposal := a.rounds(ctx, mode, ticket, uint64(time.Now().UnixMicro()), false)
	defer func() { b.admission.leave(a.late) }()
	return b.decideAttempt(ctx, a, t, proposal, start)
}

// newAttempt makes an attempt of the request req (of the waiter qid, whose
// attempts share done; "" and nil for a TryLock).
func (b *Backend) newAttempt(req dlock.Request, qid string, done *atomic.Bool) *attempt {
	return &attempt{b: b, req: req, gid: newID(), qid: qid, owner: req.Owner, done: done, ch: make(chan nodeRes, len(b.nodes)*maxRounds)}
}

// decideAttempt ends the attempt a, which started at start and whose last
// round t proposed proposal: a grant on a quorum, or a failure that gives
// back what it got.
func (b *Backend) decideAttempt(ctx context.Context, a *attempt, t *tally, proposal uint64, start time.Time) (dlock.Grant, attemptResult, error) {
	done := a.done
	if t.ctxErr != nil || !t.quorum(b.quorum) {
		err := b.attemptError(t)
		return dlock.Grant{}, a.fail(t), err
	}
	g, err := b.complete(ctx, a, t.granted, proposal, start)
	if err != nil {
		t.held = nil // retry after a short random pause
		return dlock.Grant{}, a.fail(t), err
	}
	if done != nil {
		done.Store(true)
	}
	a.decide(stateGranted, g.Token)
	return g, attemptResult{}, nil
}

// tally is what one round of an attempt heard from the masters.
type tally struct {
	granted, held, failed, stale []nodeRes
	got, nNew, nReent            int
	reentBy                      map[uint64]int // reentries by the token of the hold
	ctxErr                       error
}

func (t *tally) add(r nodeRes) {
	t.got++
	switch r.kind {
	case kindNew:
		t.nNew++
		t.granted = append(t.granted, r)
	case kindReent:
		// Reentries count toward a quorum only with others of the same
		// hold (the same token): the owner may hold the lock on some
		// masters by another grant.
		t.reentBy[r.fence]++
		t.nReent = max(t.nReent, t.reentBy[r.fence])
		t.granted = append(t.granted, r)
	case kindHeld:
		t.held = append(t.held, r)
	case kindStale:
		t.stale = append(t.stale, r)
	default:
		t.failed = append(t.failed, r)
	}
}

// slowOnly reports whether the round missed a quorum only for masters
// that did not answer within the node timeout, and would have had one had
// they granted. A waiting Lock makes another round then (with the same
// acquisition id, so a master that granted late counts once): in a burst
// of acquisitions on a loaded machine, the answers of healthy masters can
// come too late to be read in time, and the first attempt of a Lock is
// the one that reports an unavailable store at once.
func (t *tally) slowOnly(q int) bool {
	if len(t.held) > 0 || len(t.failed) == 0 || t.nNew+len(t.stale)+len(t.failed) < q {
		return false
	}
	for _, r := range t.failed {
		if !isTimeout(r.err) {
			return false
		}
	}
	return true
}

// timedOut reports whether a master did not answer the round in time.
func (t *tally) timedOut() bool {
	return slices.ContainsFunc(t.failed, func(r nodeRes) bool { return isTimeout(r.err) })
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// quorum reports whether the round got a quorum of new grants, or of
// reentries of the owner's hold; a mix of the two is the owner's other
// hold on a minority (see complete).
func (t *tally) quorum(q int) bool { return t.nNew >= q || t.nReent >= q }

// rounds runs the attempt's rounds and returns the last one's tally and
// proposal. The first proposed token is the local clock in µs, so that it
// is usually above every master's fence and the grant takes one round
// trip. A master whose fence is not below it refuses (stale), and the next
// round proposes above the highest fence seen. Safety does not depend on
// the clock, only the number of rounds does. With sent, the first round's
// requests were sent already (see pass.go): its answers come on a.ch.
func (a *attempt) rounds(ctx context.Context, mode string, ticket int64, proposal uint64, sent bool) (*tally, uint64) {
	b, n := a.b, len(a.b.nodes)
	// Per-node calls do not end with ctx: a call cut short may still have
	// been granted, and its answer decides whether to give it back.
	nctx := context.WithoutCancel(ctx)
	keys := b.keys(a.req.Name)
	for round := 0; ; round++ {
		a.mu.Lock()
		a.maxP = max(a.maxP, proposal)
		a.mu.Unlock()
		if !sent || round > 0 {
			a.send(nctx, round, keys[0], a.command(keys, mode, ticket, proposal))
		}
		t := a.collect(ctx, round)
		a.late = a.late || t.timedOut()
		if t.ctxErr != nil || t.quorum(b.quorum) || round+1 >= maxRounds {
			return t, proposal
		}
		stale := len(t.stale) > 0 && t.nNew+len(t.stale)+n-t.got >= b.quorum
		if !stale && !(a.req.Wait && t.slowOnly(b.quorum)) {
			return t, proposal
		}
		for _, r := range t.stale {
			proposal = max(proposal, r.fence+1)
		}
	}
}

// command is the acquire script's command of a round of the attempt on
// the keys of its lock, proposing proposal.
func (a *attempt) command(keys []string, mode string, ticket int64, proposal uint64) []any {
	return evalArgs(acquireScript, keys, a.req.Owner, dur.Ceil(a.req.TTL, time.Millisecond), a.gid, mode, ticket, waiterTimeout.Milliseconds(), proposal, a.qid)
}

// send runs one round's request on every master; an answer that comes
// after the attempt was decided is dealt with as a late one.
func (a *attempt) send(nctx context.Context, round int, key string, full []any) {
	b, n := a.b, len(a.b.nodes)
	rctx, done := b.roundCtx(nctx, n)
	for i := range n {
		b.bg.Add(1)
		b.spawn(i, func() {
			defer b.bg.Done()
			r := b.tryNode(rctx, i, key, full)
			done()
			a.deliver(r, round)
		})
	}
}

// deliver passes master r.i's answer to the round to the attempt, or deals
// with it as a late one if the attempt was decided.
func (a *attempt) deliver(r nodeRes, round int) {
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
}

// collect reads the round's answers until a quorum granted, cannot grant,
// or ctx ends.
func (a *attempt) collect(ctx context.Context, round int) *tally {
	q, n := a.b.quorum, len(a.b.nodes)
	t := &tally{reentBy: map[uint64]int{}}
	for !t.quorum(q) && max(t.nNew, t.nReent)+n-t.got >= q {
		select {
		case r := <-a.ch:
			if r.round != round {
				// An earlier round's answer: this round's request to the
				// same master answers for it (same attempt id).
				continue
			}
			t.add(r)
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			return t
		}
	}
	return t
}

// attemptError is the error of an attempt whose last round t got no quorum.
func (b *Backend) attemptError(t *tally) error {
	n := len(b.nodes)
	switch {
	case t.ctxErr != nil:
		return t.ctxErr
	case foreignIn(t.failed) != nil:
		// Foreign data on a master decides a failed attempt: waiting
		// would not make it go away.
		return foreignIn(t.failed)
	case len(t.failed) > n-b.quorum:
		return b.quorumError("acquire", len(t.granted), t.failed)
	case len(t.held) == 0:
		return fmt.Errorf("%w: %d of %d masters granted, %d needed", dlock.ErrNotAcquired, len(t.granted), n, b.quorum)
	default:
		return notAcquired(t.held, len(t.granted), b.quorum)
	}
}

// fail decides the attempt failed and gives back at once everything it
// may have got; masters that answer later give back when they answer. It
// returns what the attempt saw, for the waiter's timing.
func (a *attempt) fail(t *tally) attemptResult {
	b := a.b
	pending := a.decide(stateFailed, 0)
	var wg sync.WaitGroup
	for _, r := range slices.Concat(t.granted, t.failed, t.stale, pending) {
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
	res := splitInfo(t.held, b.quorum)
	for _, r := range slices.Concat(t.granted, t.stale, pending) {
		if r.err == nil && r.kind != kindHeld {
			res.free = append(res.free, r.i)
		}
	}
	res.split = res.split && len(t.granted) > 0
	res.near = res.split && t.nNew >= b.quorum-1
	return res
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
	// Answers from now on are late ones (see send): drop the buffer, which
	// a granted attempt would keep for as long as its hold lasts (room
	// for every master's answer to every round, 1.5 KiB with 5 masters).
	a.ch = nil
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
	var g dlock.Grant
	var fenced int
	var toFence []nodeRes
	if hold := b.quorumHold(granted); hold != nil {
		g, fenced, toFence = a.reenter(hold, granted)
	} else {
		g, fenced, toFence = a.grantNew(granted, proposal)
	}
	if len(toFence) > 0 {
		ok, failed := a.fence(context.WithoutCancel(ctx), toFence, g.Token)
		if fenced += ok; fenced < b.quorum {
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

// quorumHold returns the reentries of the hold a quorum of them share (its
// token), or nil.
func (b *Backend) quorumHold(granted []nodeRes) []nodeRes {
	by := map[uint64][]nodeRes{}
	var hold []nodeRes
	for _, r := range granted {
		if r.kind != kindReent {
			continue
		}
		by[r.fence] = append(by[r.fence], r)
		if len(by[r.fence]) >= b.quorum {
			hold = by[r.fence]
		}
	}
	return hold
}

// reenter makes the grant of a reentry of hold: the masters that granted
// anew are fenced with its token, and a reentry of another hold of the
// owner on a minority is undone, as in a new grant.
func (a *attempt) reenter(hold, granted []nodeRes) (g dlock.Grant, fenced int, toFence []nodeRes) {
	best := hold[0]
	a.reentry = true
	g = dlock.Grant{Token: best.fence, Count: 1, Handle: &handle{gid: best.gid, a: a}}
	for _, r := range hold {
		g.Count = max(g.Count, r.count)
	}
	for _, r := range granted {
		switch {
		case r.kind == kindNew:
			toFence = append(toFence, r)
		case r.fence != best.fence:
			a.giveBackLater(r)
		}
	}
	return g, len(hold), toFence
}

// grantNew makes the grant of a new hold with token proposal. The masters
// that granted anew took the proposal as their fence with the grant (those
// that granted in an earlier round take it now). Masters where the owner
// holds otherwise (a hold of the same owner being released, or one that
// lost its quorum) took the request as a reentry of that hold; that is
// undone, and they join this hold at its renewals once that one is gone.
func (a *attempt) grantNew(granted []nodeRes, proposal uint64) (g dlock.Grant, fenced int, toFence []nodeRes) {
	g = dlock.Grant{Token: proposal, Count: 1, Handle: &handle{gid: a.gid, a: a}}
	for _, r := range granted {
		switch {
		case r.kind == kindReent:
			a.giveBackLater(r)
		case r.fence == proposal:
			fenced++
		default:
			toFence = append(toFence, r)
		}
	}
	return g, fenced, toFence
}

// fence writes token to the masters of toFence in parallel and returns
// how many took it and the ones that failed.
func (a *attempt) fence(nctx context.Context, toFence []nodeRes, token uint64) (ok int, failed []nodeRes) {
	errs := make([]error, len(toFence))
	var wg sync.WaitGroup
	for j, r := range toFence {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = a.b.fenceNode(nctx, r.i, a.req.Name, a.owner, r.gid, a.qid, token)
		}()
	}
	wg.Wait()
	for j, err := range errs {
		if err == nil {
			ok++
		} else {
			failed = append(failed, nodeRes{i: toFence[j].i, err: err})
		}
	}
	return ok, failed
}

// giveBackLater gives r's grant back in the background.
func (a *attempt) giveBackLater(r nodeRes) {
	a.b.bg.Add(1)
	go func() {
		defer a.b.bg.Done()
		a.b.giveBack(r.i, a.giveBackOf(r))
	}()
}

// handle is a grant's Handle: the acquisition id that the masters store
// with the hold, and the attempt that got it, whose late answers must be
// given back once the hold is released.
type handle struct {
	gid string
	a   *attempt
}
