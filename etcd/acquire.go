package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/errkind"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryBudget bounds how long Backend.Acquire retries requests that failed
// because etcd could not answer for now (a leader election takes 1-2 s).
const retryBudget = 10 * time.Second

// attemptTimeout bounds one request of an acquisition: half the TTL, at
// least 500ms and at most 5 s. A request to a leader that just died can
// hang for etcd's request timeout (5 s + 2 election timeouts); a grant
// that arrives that late would be of little use, since the Client counts
// the lease from the moment it asked.
func attemptTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/2, 500*time.Millisecond), 5*time.Second)
}

// late reports whether a grant answered at elapsed after the attempt began
// came too late to hand out: the Client's lease, counted from the start of
// the attempt, would have less than half its TTL left.
func late(elapsed, ttl time.Duration) bool { return elapsed > ttl/2 }

// backoff returns the pause before retry number n (from 1).
func backoff(n int) time.Duration {
	return min(25*time.Millisecond<<min(n, 6), time.Second)
}

func heldError(first *mvccpb.KeyValue) error {
	if first == nil {
		return errkind.Errorf(dlock.ErrNotAcquired, "etcd: held")
	}
	return &dlock.HeldError{Holder: dlock.Holder{Owner: decode(first).Owner, Token: uint64(first.CreateRevision)}}
}

// retryable reports whether a request of an attempt that failed with err
// (under actx, a per-attempt context of ctx) may be tried again.
func retryable(ctx, actx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return transient(err) || actx.Err() != nil || strings.Contains(err.Error(), "proposal dropped")
}

// Acquire puts the acquisition's key on the backend's shared lease of
// req.TTL (rounded up to whole seconds; granted at first use) if the
// lock's prefix is empty, and otherwise reads the holder and — when
// req.Wait — enqueues the key and reads its predecessor, all in one
// transaction. A keep-alive sent with it confirms the lease unless another
// request did so within the last eighth of its TTL; then the grant counts
// from that confirmation (Grant.Age). When the holder's owner is req.Owner
// it re-enters the hold instead. Requests that fail because etcd has no
// leader or cannot be reached are retried for a few seconds; the
// transaction is idempotent (the key is the acquisition's own, and a key
// put by an attempt whose answer was lost is recognised as the caller's).
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	a := &acquisition{b: b, ctx: ctx, req: req, start: time.Now(), need: ttlSeconds(req.TTL),
		lp: b.lockPrefix(req.Name), val: encode(req.Owner, 1)}
	if req.Kind != dlock.KindMutex {
		a.val = encodeValue(value{Owner: req.Owner, Holds: 1, Kind: req.Kind, Limit: req.Limit, Weight: req.Weight, Value: req.Value})
	}
	defer a.settle()
	next := retry
	for n := 0; ; n++ {
		if n > 0 && next != retryNow {
			if time.Since(a.start) > retryBudget || dur.Sleep(ctx, backoff(n)) != nil {
				return dlock.Grant{}, nil, wrap(ctx, "acquiring", a.lastErr)
			}
		}
		var r result
		if r, next = a.attempt(n); next == final {
			return r.g, r.w, r.err
		}
	}
}

// acquisition is one call of Backend.Acquire: its attempts share one key,
// and what they learnt about it decides, at the end, whether the key is
// kept (by a grant or a waiter) or deleted.
type acquisition struct {
	b     *Backend
	ctx   context.Context
	req   dlock.Request
	start time.Time
	need  int64  // the lease's TTL, seconds
	lp    string // the lock's prefix
	val   string // the key's value

	cur       *sharedLease // the attempts' lease; nil to take one
	key       string       // the acquisition's key on cur
	confirmed bool         // etcd had cur at cur.alive, so it lives a TTL from then
	clean     bool         // the key cannot be on etcd
	keep      bool         // the key is in use by a grant or a waiter
	lastErr   error        // of the last attempt that failed on etcd
}

// An outcome is where an attempt (or a step of one) leaves the acquisition.
type outcome int

const (
	proceed  outcome = iota // go on with the attempt's next step
	final                   // the acquisition has its answer
	retry                   // try again after a pause
	retryNow                // try again at once: the lease had expired
)

// result is the answer of Backend.Acquire.
type result struct {
	g   dlock.Grant
	w   dlock.Waiter
	err error
}

// attempt makes one try: a lease, the transaction, and what its answer
// means.
func (a *acquisition) attempt(n int) (result, outcome) {
	// The bound is a timer, not a deadline on the context: gRPC would send
	// a deadline with every request (a grpc-timeout header, and a timer
	// on the server per request); the timer is only for a request that
	// hangs.
	actx, cancel := context.WithCancel(a.ctx)
	var timedOut atomic.Bool
	d := attemptTimeout(a.req.TTL)
	t := time.AfterFunc(d, func() { timedOut.Store(true); cancel() })
	defer func() {
		t.Stop()
		cancel()
		if timedOut.Load() && a.ctx.Err() == nil && a.lastErr != nil {
			// Not the caller's cancellation: etcd did not answer in time.
			a.lastErr = fmt.Errorf("etcd did not answer within %v: %w", d, context.DeadlineExceeded)
		}
	}()
	if a.cur == nil {
		if next, err := a.takeLease(actx); next != proceed {
			return result{err: err}, next
		}
	}
	h := &handle{name: a.req.Name, key: a.key, need: a.need, lease: a.cur.id, alive: a.cur.alive, reuse: n == 0,
		fresh: a.req.Fresh, checked: a.b.listed.epoch()}
	if a.req.Kind != dlock.KindMutex {
		return a.weighted(actx, n, h)
	}
	tr, next, err := a.transact(actx, h)
	if next != proceed {
		return result{err: err}, next
	}
	return a.answer(n, tr, h)
}

// takeLease gives the acquisition the backend's shared lease, and a new
// key on it.
func (a *acquisition) takeLease(actx context.Context) (outcome, error) {
	l, err := a.b.shared(actx, a.need)
	if err != nil {
		a.lastErr = err
		if retryable(a.ctx, actx, err) {
			return retry, nil
		}
		return final, wrap(a.ctx, "granting a lease", err)
	}
	a.cur, a.key, a.confirmed, a.clean = &l, a.b.newKey(a.req.Name, a.lp, l.id), false, true
	return proceed, nil
}

// transact puts the key h if the lock's prefix is empty, and otherwise
// reads the holder and, for a waiting request, enqueues h and reads its
// predecessor; a keep-alive sent with it confirms the lease, unless it is
// fresh.
func (a *acquisition) transact(actx context.Context, h *handle) (*clientv3.TxnResponse, outcome, error) {
	put := clientv3.OpPut(h.key, a.val, clientv3.WithLease(a.cur.id))
	els := []clientv3.Op{clientv3.OpGet(a.lp, clientv3.WithFirstCreate()...)}
	if a.req.Wait {
		// The previous value tells a key put by an earlier attempt.
		// The keys before it, newest first: its predecessor, and all of
		// them when there are few (see waiter.older).
		els = append(els, clientv3.OpGet(a.lp, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(maxOlder)),
			clientv3.OpPut(h.key, a.val, clientv3.WithLease(a.cur.id), clientv3.WithPrevKV()))
	}
	empty := clientv3.Compare(clientv3.CreateRevision(a.lp), "=", 0).WithPrefix()
	return a.commit(actx, h, empty, []clientv3.Op{put}, els)
}

// commit sends an attempt's transaction, If(cmp) Then(then) Else(els),
// with a keep-alive that confirms the lease unless it is fresh.
func (a *acquisition) commit(actx context.Context, h *handle, cmp clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, outcome, error) {
	var (
		kac chan keepAliveResult
		ka  keepAliveResult
	)
	if !a.confirmed {
		if l, ok := a.b.freshShared(a.cur.id); ok {
			ka = keepAliveResult{ttl: l.ttl, sent: l.alive} // no keep-alive, no goroutine
		} else {
			kac = a.b.confirmAsync(actx, a.cur.id)
		}
	}
	tr, err := a.b.cli.Txn(actx).If(cmp).Then(then...).Else(els...).Commit()
	if !a.confirmed {
		if kac != nil {
			ka = <-kac
		}
		switch {
		case ka.err == nil && ka.ttl > 0:
			a.confirmed = true
			a.cur.alive, h.alive = ka.sent, ka.sent
		case ka.err == nil:
			a.cur = nil // the lease expired, with any key put on it
			return nil, retryNow, nil
		case err == nil:
			a.clean = false
			err = ka.err
		}
	}
	if err == nil {
		return tr, proceed, nil
	}
	a.lastErr = err
	switch {
	case leaseNotFound(err):
		a.b.dropShared(a.cur.id)
		a.cur = nil // expired, and took any key with it
		return nil, retryNow, nil
	case retryable(a.ctx, actx, err):
		a.clean = false
		return nil, retry, nil
	}
	a.clean = false
	return nil, final, wrap(a.ctx, "acquiring", err)
}

// answer turns the transaction's answer into the acquisition's: a grant,
// a reentry, a waiter, or the holder.
func (a *acquisition) answer(n int, tr *clientv3.TxnResponse, h *handle) (result, outcome) {
	holder := firstKV(tr, 0)
	switch {
	case tr.Succeeded:
		return a.granted(tr.Header.Revision, holder, h), final
	case holder != nil && string(holder.Key) == h.key:
		// An earlier attempt put the key and its answer was lost.
		return a.granted(holder.CreateRevision, holder, h), final
	}
	if a.req.Wait {
		a.clean = false // enqueued
	}
	// Unless a waiter keeps it, revoking the lease at the end also takes
	// the key that a waiting request enqueued out of the queue.
	if holder != nil {
		if why := foreign(holder); why != "" {
			return result{err: foreignError(holder, why)}, final
		}
		v := decode(holder)
		if v.Kind != dlock.KindMutex {
			return a.refuse(h, dlock.Conflict(v.Kind, v.Limit, a.req)), final
		}
		if v.Owner == a.req.Owner {
			drop := ""
			if a.req.Wait {
				drop = h.key // enqueued by this attempt
			}
			g, err := a.b.reenter(a.ctx, a.req, holder, a.need, drop)
			if err == nil && drop != "" {
				a.clean = true
			}
			if errors.Is(err, errHolderChanged) && n < 10 {
				a.lastErr = err
				return result{}, retry
			}
			return result{g: g, err: err}, final
		}
	}
	if !a.req.Wait {
		return result{err: heldError(holder)}, final
	}
	w := &waiter{b: a.b, req: a.req, need: a.need, h: h, ttl: a.cur.ttl, lastKA: a.cur.alive}
	w.rev = tr.Header.Revision
	if pr := tr.Responses[2].GetResponsePut(); pr != nil && pr.PrevKv != nil {
		w.rev = pr.PrevKv.CreateRevision // put by an earlier attempt
	}
	if pred := firstKV(tr, 1); pred != nil && pred.CreateRevision < w.rev {
		w.pred, w.predRev, w.seen = string(pred.Key), pred.CreateRevision, tr.Header.Revision
		w.olderAt(tr.Responses[1].GetResponseRange(), tr.Header.Revision)
	}
	a.keep = true
	return result{w: w, err: heldError(holder)}, final
}

// granted is the answer when the key h is the lowest, with token its
// create revision: a grant, unless it came so late that the Client's lease
// would be mostly spent.
func (a *acquisition) granted(token int64, holder *mvccpb.KeyValue, h *handle) result {
	a.clean = false
	if elapsed := time.Since(a.start); late(elapsed, a.req.TTL) {
		if !a.req.Wait {
			return result{err: errkind.Errorf(dlock.ErrBackendUnavailable,
				"etcd: the grant came %v after the request, more than half the TTL of %v; given back", elapsed.Round(time.Millisecond), a.req.TTL)}
		}
		// The key is the lowest and stays queued; the waiter confirms
		// the grant with a fresh attempt, which the Client times anew.
		a.keep = true
		w := &waiter{b: a.b, req: a.req, need: a.need, h: h, ttl: a.cur.ttl, rev: token, lastKA: a.cur.alive}
		if a.req.Kind != dlock.KindMutex {
			w.ahead = newAhead(a.req) // the attempt reads the keys before it
		}
		return result{w: w, err: errkind.Errorf(dlock.ErrNotAcquired,
			"etcd: the grant came %v after the request; confirming it", elapsed.Round(time.Millisecond))}
	}
	a.keep = true
	count := 1
	if holder != nil && string(holder.Key) == h.key {
		count = max(decode(holder).Holds, 1)
	}
	a.b.track(h)
	return result{g: dlock.Grant{Token: uint64(token), Count: count, Handle: h, Age: max(a.start.Sub(a.cur.alive), 0)}}
}

// refuse is the answer err to a request that the name refuses (another
// kind): the key this attempt enqueued, if any, is deleted before the
// answer, so that the next request of the name's own kind does not find
// it in the queue.
func (a *acquisition) refuse(h *handle, err error) result {
	if a.req.Wait {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), revokeTimeout)
		if _, derr := a.b.cli.Delete(dctx, h.key); derr == nil {
			a.clean = true
		}
		cancel()
	}
	return result{err: err}
}

// settle deletes the acquisition's key, once it has its answer, unless a
// grant or a waiter keeps it or no attempt can have put it.
func (a *acquisition) settle() {
	if a.cur != nil && !a.keep && !a.clean {
		a.b.deleteLater(a.key)
	}
}

// keepAliveResult is the answer to one keep-alive: the lease's TTL (0 if
// etcd does not know it) and the send time.
type keepAliveResult struct {
	ttl  int64
	sent time.Time
	err  error
}

// confirmAsync confirms that lease id is alive: at once, with the time of
// its last confirmation, when it is a fresh shared lease (see
// sharedLease.fresh), and otherwise with a keep-alive, in a goroutine; the
// result comes on the channel.
func (b *Backend) confirmAsync(ctx context.Context, id clientv3.LeaseID) chan keepAliveResult {
	ch := make(chan keepAliveResult, 1)
	if l, ok := b.freshShared(id); ok {
		ch <- keepAliveResult{ttl: l.ttl, sent: l.alive}
		return ch
	}
	sent := time.Now()
	go func() {
		ttls, err := b.keepAlive(ctx, []clientv3.LeaseID{id})
		ch <- keepAliveResult{ttls[id], sent, err}
	}()
	return ch
}

var errHolderChanged = errors.New("etcd: the holder changed")

// reenter adds a hold to the holder's key, whose owner is req.Owner, and
// makes sure its lease lives for at least need seconds from now. The same
// transaction deletes the key drop ("": none), which the acquisition
// enqueued: left for later, it would sit in the queue after the Lock
// returned, and become the lowest key if the holder let go first.
func (b *Backend) reenter(ctx context.Context, req dlock.Request, kv *mvccpb.KeyValue, need int64, drop string) (dlock.Grant, error) {
	key := string(kv.Key)
	if b.made(key) && !b.reent.reenter(key) {
		return dlock.Grant{}, errHolderChanged // being released: try again
	}
	v := decode(kv)
	checked := b.listed.epoch()
	v.Holds++ // the value is otherwise kept: the owner is req.Owner's
	ops := []clientv3.Op{clientv3.OpPut(key, encodeValue(v), clientv3.WithIgnoreLease())}
	if drop != "" {
		ops = append(ops, clientv3.OpDelete(drop))
	}
	tr, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(ops...).
		Commit()
	if err != nil {
		return dlock.Grant{}, wrap(ctx, "re-entering", err)
	}
	if !tr.Succeeded {
		return dlock.Grant{}, errHolderChanged
	}
	h := &handle{name: req.Name, key: key, need: need, lease: clientv3.LeaseID(kv.Lease), checked: checked}
	r := &renewal{h: h, owner: req.Owner, token: kv.CreateRevision, need: need}
	b.renewAll(ctx, []*renewal{r})
	if r.err != nil {
		// Take the hold back; the outer hold is not ours to end.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
		_ = b.release(rctx, h, req.Owner, kv.CreateRevision)
		cancel()
		if errors.Is(r.err, dlock.ErrLeaseLost) {
			return dlock.Grant{}, errHolderChanged
		}
		return dlock.Grant{}, r.err
	}
	b.track(h)
	return dlock.Grant{Token: uint64(kv.CreateRevision), Count: v.Holds, Handle: h}, nil
}
