package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/redisconn"
	goredis "github.com/redis/go-redis/v9"
)

// Backend is a [dlock.Backend] on N independent Redis masters. Create it
// with [New] on one go-redis client per master, or open it by URL with
// dlock.Open. It is safe for concurrent use.
type Backend struct {
	nodes  []*goredis.Client
	addrs  []string
	quorum int
	cfg    config
	owned  bool // Close closes the clients
	desc   string
	id     string // the prefix of this Backend's waiter ids (16 hex digits)

	bg        sync.WaitGroup // per-node calls that outlive the operation that started them
	closeOnce sync.Once
	closed    atomic.Bool
	stop      chan struct{}  // closed by Close: stops the give-back retries
	retries   []retryQueue   // per master: give-backs that failed and are retried
	conduits  []conduit      // per master: the calls to it
	notices   []notices      // per master: the release notices to waiters
	woken     atomic.Int64   // waiters woken by release notices (for tests)
	received  atomic.Int64   // release notices received (for tests)
	workers   sync.WaitGroup // goroutines sending queued calls
	pool      sync.WaitGroup // goroutines of the masters' pools (see spawn)
	quit      chan struct{}  // closed by Close after b.bg: ends the pools
}

var _ dlock.Backend = (*Backend)(nil)

// New returns a backend on the masters that clients connect to, one client
// per master; a grant needs len(clients)/2+1 of them. The backend does not
// take the clients over: Close leaves them open. Make the clients with
// ContextTimeoutEnabled, so that the per-node timeout ([NodeTimeout])
// bounds their reads and writes, and with MaxRetries -1: a script whose
// reply was lost must not run twice.
func New(clients []*goredis.Client, opts ...Option) (*Backend, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if len(clients) == 0 {
		cfg.errs = append(cfg.errs, "no masters")
	}
	for _, c := range clients {
		if c == nil {
			cfg.errs = append(cfg.errs, "nil client")
			break
		}
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("%w: redlock: %s", dlock.ErrInvalidOption, strings.Join(cfg.errs, "; "))
	}
	b := &Backend{nodes: clients, quorum: len(clients)/2 + 1, cfg: cfg, stop: make(chan struct{}), quit: make(chan struct{}), retries: make([]retryQueue, len(clients))}
	for _, c := range clients {
		b.addrs = append(b.addrs, c.Options().Addr)
	}
	b.desc = "redlock " + strings.Join(b.addrs, ",")
	b.id = newID()[:16]
	b.startConduits()
	b.startNotices()
	return b, nil
}

// String describes the backend, e.g. "redlock h1:6379,h2:6379,h3:6379".
func (b *Backend) String() string { return b.desc }

// Quorum returns the number of masters a grant and a renewal need.
func (b *Backend) Quorum() int { return b.quorum }

// Close waits for per-node calls still in flight (each is bounded by the
// node timeout), stops retrying give-backs that have not reached their
// masters yet (those holds expire with their TTL), and closes the clients
// if the backend made them.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.stop)
		b.bg.Wait()
		close(b.quit)
		b.pool.Wait()
		b.workers.Wait()
		for i := range b.notices {
			b.notices[i].close()
		}
		if b.owned {
			for _, c := range b.nodes {
				if cerr := c.Close(); cerr != nil && err == nil {
					err = cerr
				}
			}
		}
	})
	return err
}

func (b *Backend) lockKey(name string) string { return b.cfg.prefix + ":{" + encodeName(name) + "}" }

func (b *Backend) channel(name string) string { return b.lockKey(name) + ":wake" }

// fenceKey is the key of the fence of the names in name's Cluster slot
// (see the scripts): at most 16384 per master, whatever the number of
// names.
func (b *Backend) fenceKey(name string) string {
	return b.cfg.prefix + ":fence:{" + redisconn.SlotTag(redisconn.Slot(encodeName(name))) + "}"
}

// keys are the lock hash, the fair queue and its waiters' deadlines, the
// queue of waiters that are not fair and their deadlines, and the fence
// key.
func (b *Backend) keys(name string) []string {
	k := b.lockKey(name)
	suffixes := [...]string{"", ":queue", ":deadlines", ":wqueue", ":wdeadlines"}
	size := 0
	for _, s := range suffixes[1:] {
		size += len(k) + len(s)
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, s := range suffixes[1:] {
		sb.WriteString(k)
		sb.WriteString(s)
	}
	all := sb.String() // one allocation for the four keys that are not k
	keys := make([]string, len(suffixes), len(suffixes)+1)
	keys[0] = k
	at := 0
	for j, s := range suffixes[1:] {
		keys[j+1] = all[at : at+len(k)+len(s)]
		at += len(k) + len(s)
	}
	return append(keys, b.fenceKey(name))
}

// drift is the allowance for clock drift between the masters and this
// process over ttl: ttl×DriftFactor + 2ms, as the Redlock description has
// it.
func (b *Backend) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*b.cfg.drift) + 2*time.Millisecond
}

// nodeCtx bounds one call to one master.
func (b *Backend) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.nodeTimeout)
}

// roundCtx bounds calls made at once to each of the n masters by the node
// timeout, with one context for all of them; each call runs done when it
// ends, and the last one releases the context.
func (b *Backend) roundCtx(ctx context.Context, n int) (rctx context.Context, done func()) {
	rctx, cancel := b.nodeCtx(ctx)
	var left atomic.Int32
	left.Store(int32(n))
	return rctx, func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
}

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

func (b *Backend) fenceNode(ctx context.Context, i int, name, owner, gid, qid string, token uint64) error {
	ctx, cancel := b.nodeCtx(ctx)
	defer cancel()
	v, err := b.run(ctx, i, fenceScript, b.keys(name), owner, gid, token, qid).Int64()
	if err != nil {
		return err
	}
	if v != 1 {
		return errors.New("the grant expired before its token was written")
	}
	return nil
}

// giveBack is the release of one hold (or of what an attempt may have got)
// on one master.
type giveBack struct {
	name, owner string
	token       string // the hold's token; "" to match by gid only
	gid         string // the acquisition id stored with the grant
	qid         string // the waiter to take out of the queues, if any
	floor       string // the master's fence is raised to this when the lock is free there
	until       time.Time

	keys []string // of the release script, made by prepare
	args []any
}

// prepare makes gb's script keys and arguments, the same for every master.
func (b *Backend) prepare(gb *giveBack) {
	gb.keys = b.keys(gb.name)
	gb.args = []any{gb.owner, gb.token, gb.gid, b.channel(gb.name), gb.qid, gb.floor, b.cfg.nodeTimeout.Milliseconds()}
}

// releaseNode gives up one hold on master i. It reports whether the master
// released.
func (b *Backend) releaseNode(ctx context.Context, i int, gb giveBack) (bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = b.nodeCtx(ctx)
		defer cancel()
	}
	if gb.keys == nil {
		b.prepare(&gb)
	}
	v, err := b.run(ctx, i, releaseScript, gb.keys, gb.args...).Slice()
	if err != nil {
		return false, err
	}
	ok, _ := v[0].(int64)
	return ok == 1, nil
}

// giveBack releases gb on master i, and if the master cannot be reached
// queues it for retries (see retryQueue). It reports whether the master
// released.
func (b *Backend) giveBack(i int, gb giveBack) bool {
	ok, err := b.releaseNode(context.Background(), i, gb)
	if err != nil {
		b.retry(i, gb)
	}
	return ok
}

// retryQueue holds the give-backs that did not reach a master. A master
// that did not answer (paused, slow, its link cut) may still execute an
// acquisition sent to it earlier, after the release that was meant to
// undo it failed: nobody would release that grant, and it would keep the
// lock from everyone on that master for a whole TTL. So the release is
// retried, by one goroutine per master while there is anything to retry,
// until it reaches the master or until any grant it undoes has expired.
// (A release that arrives first raises the master's fence above the
// grant's token, so that the late acquisition is refused.)
type retryQueue struct {
	mu      sync.Mutex
	items   []giveBack
	running bool
}

// retryDelay bounds the pause between retries of give-backs.
const maxRetryDelay = 250 * time.Millisecond

func (b *Backend) retry(i int, gb giveBack) {
	q := &b.retries[i]
	q.mu.Lock()
	defer q.mu.Unlock()
	if b.closed.Load() {
		return
	}
	q.items = append(q.items, gb)
	if !q.running {
		q.running = true
		b.bg.Add(1)
		go b.retryLoop(i)
	}
}

func (b *Backend) retryLoop(i int) {
	defer b.bg.Done()
	q := &b.retries[i]
	delay := 10 * time.Millisecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.stop:
			q.mu.Lock()
			q.items, q.running = nil, false
			q.mu.Unlock()
			return
		}
		q.mu.Lock()
		now := time.Now()
		q.items = slices.DeleteFunc(q.items, func(gb giveBack) bool { return now.After(gb.until) })
		if len(q.items) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		items := slices.Clone(q.items)
		q.mu.Unlock()
		done := 0
		for _, gb := range items {
			if _, err := b.releaseNode(context.Background(), i, gb); err != nil {
				break
			}
			done++
		}
		q.mu.Lock()
		q.items = q.items[done:]
		q.mu.Unlock()
		if done == len(items) {
			delay = 10 * time.Millisecond
		} else {
			delay = min(2*delay, maxRetryDelay)
		}
		t.Reset(delay)
	}
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

// fanOut runs call on every master in parallel, each under the node
// timeout, and returns when need of them succeeded, when all answered, or
// (with giveUp) when need can no longer be reached. Calls still running
// finish in the background.
func (b *Backend) fanOut(ctx context.Context, need int, giveUp bool, call func(ctx context.Context, i int) (bool, error)) (ok int, no []int, failed []nodeRes) {
	type res struct {
		i   int
		ok  bool
		err error
	}
	n := len(b.nodes)
	ch := make(chan res, n)
	rctx, end := b.roundCtx(ctx, n)
	for i := range n {
		b.bg.Add(1)
		b.spawn(i, func() {
			defer b.bg.Done()
			done, err := call(rctx, i)
			end()
			ch <- res{i, done, err}
		})
	}
	for got := 0; got < n; got++ {
		if ok >= need || giveUp && ok+n-got < need {
			break
		}
		r := <-ch
		switch {
		case r.err != nil:
			failed = append(failed, nodeRes{i: r.i, err: r.err})
		case r.ok:
			ok++
		default:
			no = append(no, r.i)
		}
	}
	return ok, no, failed
}

// Renew extends the hold on every master in parallel. It succeeds when a
// quorum extended it in time to leave validity; otherwise the hold is lost
// (the error matches [dlock.ErrLeaseLost]), because fewer than a quorum
// cannot keep it from another client, and what is left of it is released
// in the background.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	start := time.Now()
	keys := []string{b.lockKey(h.Name), b.fenceKey(h.Name)}
	tok := strconv.FormatUint(h.Token, 10)
	hd, _ := h.Handle.(*handle)
	gid := ""
	if hd != nil {
		gid = hd.gid
	}
	if hd != nil && hd.a.maxTTL.Load() < int64(ttl) {
		hd.a.maxTTL.Store(int64(ttl))
	}
	nctx := context.WithoutCancel(ctx)
	ok, no, failed := b.fanOut(nctx, b.quorum, true, func(ctx context.Context, i int) (bool, error) {
		v, err := b.run(ctx, i, renewScript, keys, h.Owner, tok, dur.Ceil(ttl, time.Millisecond), gid).Int64()
		return v == 1, err
	})
	if ok < b.quorum {
		b.releaseLost(h)
		e := b.quorumError("renew", ok, failed)
		for _, i := range no {
			e.Failed = append(e.Failed, NodeError{Addr: b.addrs[i], Err: errors.New("does not hold it")})
		}
		return fmt.Errorf("%w: %w", dlock.ErrLeaseLost, e)
	}
	if el := time.Since(start); ttl-el-b.drift(ttl) <= 0 {
		b.releaseLost(h)
		return fmt.Errorf("%w: the renewal took %v of a %v TTL", dlock.ErrLeaseLost, el.Round(time.Millisecond), ttl)
	}
	return nil
}

// releaseLost releases a lost hold in the background on every master that
// may still have it, so that a minority keeps nobody out until its TTL.
// (A later Release of the lease finds nothing and reports the loss.)
func (b *Backend) releaseLost(h dlock.Hold) {
	if hd, _ := h.Handle.(*handle); hd != nil && !hd.a.releasing() {
		return
	}
	gb := b.holdRelease(h)
	for i := range b.nodes {
		b.bg.Add(1)
		go func() {
			defer b.bg.Done()
			b.releaseOn(context.Background(), i, h, gb)
		}()
	}
}

// holdRelease is the release of hold h on each master.
func (b *Backend) holdRelease(h dlock.Hold) giveBack {
	gb := giveBack{name: h.Name, owner: h.Owner, token: strconv.FormatUint(h.Token, 10),
		floor: strconv.FormatUint(h.Token+1, 10), until: time.Now().Add(dur.Sum(b.maxTTL(h), b.cfg.nodeTimeout))}
	if hd, _ := h.Handle.(*handle); hd != nil {
		gb.gid, gb.qid = hd.gid, hd.a.qid
	}
	b.prepare(&gb)
	return gb
}

// releaseOn releases hold h on master i with gb (see holdRelease),
// retrying in the background when the master cannot be reached, and
// records the answer for the attempt's late grants.
func (b *Backend) releaseOn(ctx context.Context, i int, h dlock.Hold, gb giveBack) (bool, error) {
	hd, _ := h.Handle.(*handle)
	ok, err := b.releaseNode(ctx, i, gb)
	if err != nil {
		b.retry(i, gb)
	}
	if hd != nil {
		// A release that did not reach the master is retried, and counts
		// as reaching it: a grant that comes later is refused there.
		hd.a.releasedOn(i, ok || err != nil)
	}
	return ok, err
}

// maxTTL is how long a master may keep hold h without renewal: the TTL of
// its acquisition, or of a later renewal if that was longer.
func (b *Backend) maxTTL(h dlock.Hold) time.Duration {
	if hd, _ := h.Handle.(*handle); hd != nil {
		return max(hd.a.req.TTL, time.Duration(hd.a.maxTTL.Load()))
	}
	return time.Minute
}

// Release gives up one hold on every master in parallel. It returns as
// soon as a quorum released (the other masters are released in the
// background, and retried until they answer or the hold expires there);
// otherwise, when all answered, it succeeds if the masters that answered
// released and fewer than a quorum did not hold it, and reports
// [dlock.ErrLeaseLost] when a quorum no longer held it.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the redlock backend is closed", dlock.ErrClosed)
	}
	if hd, _ := h.Handle.(*handle); hd != nil && !hd.a.releasing() {
		return fmt.Errorf("%w: released already", dlock.ErrLeaseLost)
	}
	gb := b.holdRelease(h)
	ok, no, failed := b.fanOut(context.Background(), b.quorum, false, func(ctx context.Context, i int) (bool, error) {
		return b.releaseOn(ctx, i, h, gb)
	})
	switch {
	case ok >= b.quorum:
		return nil
	case ok > 0 && len(no) < b.quorum:
		// Masters that could not be reached are retried in the background
		// until their copies expire; fewer than a quorum of them cannot
		// keep anyone out.
		return nil
	case len(no) >= b.quorum || len(failed) == 0:
		return fmt.Errorf("%w: %d of %d masters did not hold it", dlock.ErrLeaseLost, len(no), len(b.nodes))
	default:
		return b.quorumError("release", ok, failed)
	}
}

// waiter is a waiting acquisition: it hears the release notices of every
// master that name it (see notices) and retries once they show enough free
// masters for a quorum, at the latest when the holder's lease would end,
// and after a short random pause when contenders collided.
type waiter struct {
	b      *Backend
	req    dlock.Request
	qid    string    // the waiter's id in the queues
	chans  [2]string // the lock's channel, and its channel for this Backend
	mode   string
	ticket int64
	done   *atomic.Bool // see attempt.done
	wake   chan struct{}
	first  bool // the next Wait returns at once
	// attached says, per master and channel, whether the waiter is
	// attached to its notices; nil while it is attached to none.
	attached [][2]bool
	res      attemptResult
	once     sync.Once

	mu      sync.Mutex
	noticed uint64 // masters that sent a release notice since the last attempt
	free    uint64 // masters that no other owner held at the last attempt
}

// notice records a release notice from master i and wakes the waiter
// once enough masters are free for a quorum: a first notice while most
// masters are still being released would only make an attempt that fails.
// A master counts once, noticed or free: the notice of a master that was
// free anyway — the give-back of this waiter's own grant there, say —
// frees nothing more.
func (w *waiter) notice(i int) {
	w.mu.Lock()
	w.noticed |= 1 << (i % 64) // (beyond 64 masters, notices wake early)
	ready := bits.OnesCount64(w.noticed|w.free) >= w.b.quorum || i >= 64
	w.mu.Unlock()
	if ready {
		select {
		case w.wake <- struct{}{}:
			w.b.woken.Add(1)
		default:
		}
	}
}

// attempted resets the notices for the next attempt, whose result says
// how many masters were free.
func (w *waiter) attempted(res attemptResult) {
	w.mu.Lock()
	w.res = res
	w.free = 0
	for i := range w.b.nodes {
		w.free |= 1 << (i % 64)
	}
	for _, r := range res.held {
		w.free &^= 1 << (r.i % 64)
	}
	w.mu.Unlock()
}

// maxWait bounds one wait without a notice.
const maxWait = time.Second

func (b *Backend) newWaiter(req dlock.Request, qid, mode string, ticket int64, done *atomic.Bool) *waiter {
	ch := b.channel(req.Name)
	w := &waiter{b: b, req: req, qid: qid, mode: mode, ticket: ticket, done: done, wake: make(chan struct{}, 1), first: true}
	w.chans = [2]string{ch, ch + ":" + b.id}
	return w
}

// tryAttach attaches w to the notices of every master where its channels
// have subscriptions, if all of them are confirmed, and reports whether it
// did.
func (w *waiter) tryAttach() bool {
	for i := range w.b.notices {
		for _, ch := range w.chans {
			if !w.b.notices[i].confirmed(ch) {
				return false
			}
		}
	}
	w.attached = make([][2]bool, len(w.b.notices))
	all := true
	for i := range w.b.notices {
		for j, ch := range w.chans {
			var ok bool
			w.attached[i][j], ok = w.b.notices[i].tryAttach(w, ch)
			all = all && ok
		}
	}
	return all
}

// attach attaches w to the notices on its channels of every master where
// it is not attached yet, subscribing where needed.
func (w *waiter) attach() {
	if w.attached == nil {
		w.attached = make([][2]bool, len(w.b.notices))
	}
	for i := range w.b.notices {
		for j, ch := range w.chans {
			if !w.attached[i][j] {
				w.b.notices[i].attach(w, ch)
				w.attached[i][j] = true
			}
		}
	}
}

// Wait returns on a release notice, when the holder's lease may have ended,
// or (after a collision of contenders) after a short random pause. The
// first Wait returns at once unless the waiter was attached to confirmed
// subscriptions on every master before its first attempt: otherwise a
// release between that attempt and the subscription would go unnoticed.
func (w *waiter) Wait(ctx context.Context) error {
	if w.first {
		w.first = false
		return ctx.Err()
	}
	if w.res.split {
		// Contenders split the masters: everyone gave back, so wait a
		// random moment (the Redlock retry delay) instead of all retrying
		// on the same notice. A contender that came within one master of
		// a quorum waits least, so that it usually gets it the next time
		// instead of all colliding again.
		d := time.Duration(1+rand.IntN(15)) * time.Millisecond
		if w.res.near {
			d = time.Duration(rand.IntN(300)) * time.Microsecond
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-w.wake:
		default:
		}
		return nil
	}
	d := maxWait
	// The lease ends on the quorum-th master when enough of them let it
	// go; waiting for the shortest remaining lease is early, never late.
	for _, r := range w.res.held {
		if r.ttl > 0 && r.ttl < d {
			d = r.ttl
		}
	}
	d += time.Duration(rand.IntN(5)) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Acquire makes the next attempt.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.mu.Lock()
	w.noticed = 0
	w.mu.Unlock()
	select {
	case <-w.wake:
	default:
	}
	g, res, err := w.b.attempt(ctx, w.req, w.qid, w.mode, w.ticket, w.done)
	if err == nil {
		w.close()
		return g, nil
	}
	w.attempted(res)
	return g, err
}

// Cancel stops the notices to the waiter and takes it out of the queues,
// passing a release notice it may have been named in to the next waiter.
// An attempt never leaves a grant behind, so there is nothing else to
// withdraw.
func (w *waiter) Cancel(ctx context.Context) error {
	w.close()
	w.done.Store(true)
	return w.b.cancel(ctx, w.req.Name, w.qid)
}

func (w *waiter) close() {
	w.once.Do(func() {
		for i, on := range w.attached {
			for j, ch := range w.chans {
				if on[j] {
					w.b.notices[i].detach(w, ch)
				}
			}
		}
	})
}

func newID() string {
	var buf [32]byte
	const hex = "0123456789abcdef"
	a, c := rand.Uint64(), rand.Uint64()
	for i := range 16 {
		buf[i] = hex[a>>(60-4*i)&15]
		buf[16+i] = hex[c>>(60-4*i)&15]
	}
	return string(buf[:])
}
