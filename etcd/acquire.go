package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func heldError(first *mvccpb.KeyValue) error {
	if first == nil {
		return &kindError{kind: dlock.ErrNotAcquired, msg: "etcd: held"}
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

// Acquire takes a lease of req.TTL (rounded up to whole seconds) — a spare
// one left by an earlier hold, confirmed by a keep-alive sent together with
// the transaction, or a fresh grant — and, in one transaction, puts the
// acquisition's key if the lock's prefix is empty, and otherwise reads the
// holder and — when req.Wait — enqueues the key and reads its predecessor.
// When the holder's owner is req.Owner it re-enters the hold instead.
// Requests that fail because etcd has no leader or cannot be reached are
// retried for a few seconds; the transaction is idempotent (the key is
// named after the lease, and a key put by an attempt whose answer was lost
// is recognised as the caller's).
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, nil, err
	}
	start := time.Now()
	need := ttlSeconds(req.TTL)
	per := attemptTimeout(req.TTL)
	lp := b.lockPrefix(req.Name)
	val := encode(req.Owner, 1)
	first := clientv3.WithFirstCreate()
	last := clientv3.WithLastCreate()
	empty := clientv3.Compare(clientv3.CreateRevision(lp), "=", 0).WithPrefix()

	var (
		cur       *spareLease // the attempts' lease; nil to take one
		confirmed bool        // etcd had cur after start, so it lives a TTL from then
		clean     = true      // no key can be on cur
		keep      bool        // cur is in use by a grant or a waiter
		lastErr   error
		quick     bool // retry at once (a spare lease had expired)
	)
	defer func() {
		switch {
		case cur == nil || keep:
		case clean && confirmed:
			b.putSpare(need, *cur)
		default:
			// Deletes the key too, if an attempt whose answer was lost put it.
			b.revokeLater(cur.id)
		}
	}()
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !quick {
			if time.Since(start) > retryBudget || sleepCtx(ctx, backoff(attempt)) != nil {
				return dlock.Grant{}, nil, wrap(ctx, "acquiring", lastErr)
			}
		}
		quick = false
		actx, cancel := context.WithTimeout(ctx, per)
		if cur == nil {
			if p, ok := b.takeSpare(need); ok {
				cur, confirmed, clean = &p, false, true
			} else {
				sent := time.Now()
				lr, err := b.cli.Grant(actx, need)
				if err != nil {
					lastErr = err
					if retryable(ctx, actx, err) {
						cancel()
						continue
					}
					cancel()
					return dlock.Grant{}, nil, wrap(ctx, "granting a lease", err)
				}
				cur, confirmed, clean = &spareLease{id: lr.ID, ttl: lr.TTL, alive: sent}, true, true
			}
		}
		h := &handle{name: req.Name, key: b.keyFor(req.Name, cur.id), own: cur.id, need: need, ttl: cur.ttl, lease: cur.id, alive: cur.alive}
		put := clientv3.OpPut(h.key, val, clientv3.WithLease(cur.id), clientv3.WithPrevKV())
		els := []clientv3.Op{clientv3.OpGet(lp, first...)}
		if req.Wait {
			els = append(els, clientv3.OpGet(lp, last...), put)
		}
		var kac chan keepAliveResult
		if !confirmed {
			kac = b.keepAliveAsync(actx, cur.id)
		}
		tr, err := b.cli.Txn(actx).If(empty).Then(put).Else(els...).Commit()
		if kac != nil {
			ka := <-kac
			switch {
			case ka.err == nil && ka.ttl > 0:
				confirmed = true
				cur.alive = ka.sent
				h.alive = ka.sent
			case ka.err == nil:
				// The spare lease expired, with any key put on it.
				cur, quick = nil, true
				cancel()
				continue
			default:
				if err == nil {
					clean = false
					err = ka.err
				}
			}
		}
		if err != nil {
			lastErr = err
			switch {
			case leaseNotFound(err):
				cur, quick = nil, true // expired, and took any key with it
				cancel()
				continue
			case retryable(ctx, actx, err):
				clean = false
				cancel()
				continue
			}
			clean = false
			cancel()
			return dlock.Grant{}, nil, wrap(ctx, "acquiring", err)
		}
		cancel()
		holder := firstKV(tr, 0)
		token := tr.Header.Revision
		if !tr.Succeeded && holder != nil && string(holder.Key) == h.key {
			// An earlier attempt put the key and its answer was lost.
			token = holder.CreateRevision
		} else if !tr.Succeeded {
			if req.Wait {
				clean = false // enqueued
			}
			if holder != nil {
				if why := foreign(holder); why != "" {
					// keep stays false: revoking the unused lease takes
					// the key a waiting request enqueued.
					return dlock.Grant{}, nil, foreignError(holder, why)
				}
			}
			if holder != nil && decode(holder).Owner == req.Owner {
				g, err := b.reenter(ctx, req, holder, need)
				if errors.Is(err, errHolderChanged) && attempt < 10 {
					lastErr = err
					continue
				}
				// keep stays false: revoking the unused lease also takes the
				// key that a waiting request enqueued out of the queue.
				return g, nil, err
			}
			if !req.Wait {
				return dlock.Grant{}, nil, heldError(holder)
			}
			w := &waiter{b: b, req: req, need: need, h: h, ttl: cur.ttl, lastKA: cur.alive}
			w.rev = tr.Header.Revision
			if pr := tr.Responses[2].GetResponsePut(); pr != nil && pr.PrevKv != nil {
				w.rev = pr.PrevKv.CreateRevision // put by an earlier attempt
			}
			if pred := firstKV(tr, 1); pred != nil && pred.CreateRevision < w.rev {
				w.pred, w.predRev, w.seen = string(pred.Key), pred.CreateRevision, tr.Header.Revision
			}
			keep = true
			return dlock.Grant{}, w, heldError(holder)
		}
		// Granted.
		clean = false
		if elapsed := time.Since(start); late(elapsed, req.TTL) {
			if !req.Wait {
				return dlock.Grant{}, nil, &kindError{kind: dlock.ErrBackendUnavailable,
					msg: fmt.Sprintf("etcd: the grant came %v after the request, more than half the TTL of %v; given back", elapsed.Round(time.Millisecond), req.TTL)}
			}
			// The key is the lowest and stays queued; the waiter confirms
			// the grant with a fresh attempt, which the Client times anew.
			keep = true
			w := &waiter{b: b, req: req, need: need, h: h, ttl: cur.ttl, rev: token, lastKA: cur.alive}
			return dlock.Grant{}, w, &kindError{kind: dlock.ErrNotAcquired,
				msg: fmt.Sprintf("etcd: the grant came %v after the request; confirming it", elapsed.Round(time.Millisecond))}
		}
		keep = true
		count := 1
		if holder != nil && string(holder.Key) == h.key {
			count = max(decode(holder).Holds, 1)
		}
		return dlock.Grant{Token: uint64(token), Count: count, Handle: h}, nil, nil
	}
}

// keepAliveResult is the answer to one keep-alive: the lease's TTL (0 if
// etcd does not know it) and the send time.
type keepAliveResult struct {
	ttl  int64
	sent time.Time
	err  error
}

// keepAliveAsync keeps lease id alive once, in a goroutine; the result
// comes on the channel.
func (b *Backend) keepAliveAsync(ctx context.Context, id clientv3.LeaseID) chan keepAliveResult {
	ch := make(chan keepAliveResult, 1)
	sent := time.Now()
	go func() {
		ttls, err := b.keepAlive(ctx, []clientv3.LeaseID{id})
		ch <- keepAliveResult{ttls[id], sent, err}
	}()
	return ch
}

var errHolderChanged = errors.New("etcd: the holder changed")

// reenter adds a hold to the holder's key, whose owner is req.Owner, and
// makes sure its lease lives for at least need seconds from now.
func (b *Backend) reenter(ctx context.Context, req dlock.Request, kv *mvccpb.KeyValue, need int64) (dlock.Grant, error) {
	key := string(kv.Key)
	v := decode(kv)
	tr, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, encode(req.Owner, v.Holds+1), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return dlock.Grant{}, wrap(ctx, "re-entering", err)
	}
	if !tr.Succeeded {
		return dlock.Grant{}, errHolderChanged
	}
	h := &handle{name: req.Name, key: key, lease: clientv3.LeaseID(kv.Lease)}
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
	return dlock.Grant{Token: uint64(kv.CreateRevision), Count: v.Holds + 1, Handle: h}, nil
}

// waiter is an enqueued acquisition: its key is in the lock's queue, and it
// keeps its own lease alive while it waits.
type waiter struct {
	b    *Backend
	req  dlock.Request
	need int64
	h    *handle
	rev  int64 // the key's create revision
	ttl  int64 // the TTL etcd granted the lease, seconds

	pred    string    // the predecessor's key; "" to look again at once
	predRev int64     // its create revision
	seen    int64     // a revision at which pred existed
	retry   int       // attempts in a row that failed on etcd
	lastKA  time.Time // send time of the last successful keep-alive
}

// Wait returns when the predecessor's key is deleted (or the watch ends
// for another reason), keeping the waiter's lease alive meanwhile.
//
// The watch starts at the current revision rather than at the revision at
// which the predecessor was seen: etcd serves a watch that starts in the
// past from a loop that catches up every 100ms, which would add up to
// 100ms to a hand-off. What the watch cannot see — a deletion between the
// two revisions — a read of the predecessor after the watch is in place
// does.
func (w *waiter) Wait(ctx context.Context) error {
	if w.retry > 0 {
		return sleepCtx(ctx, backoff(w.retry))
	}
	if w.pred == "" {
		return ctx.Err()
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.b.cli.Watch(wctx, w.pred, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case resp, ok := <-wch:
		if !ok || !resp.Created || resp.Canceled || resp.Err() != nil {
			return ctx.Err() // look again
		}
		if resp.Header.Revision > w.seen {
			gctx, gcancel := context.WithTimeout(ctx, attemptTimeout(w.req.TTL))
			g, err := w.b.cli.Get(gctx, w.pred)
			gcancel()
			if err != nil || len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != w.predRev {
				return ctx.Err() // gone, or look again
			}
		}
	}
	every := max(time.Duration(w.ttl)*time.Second/3, 100*time.Millisecond)
	for {
		t := time.NewTimer(time.Until(w.lastKA.Add(every)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case resp, ok := <-wch:
			t.Stop()
			if !ok || resp.Canceled || resp.Err() != nil {
				return ctx.Err() // look again
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return nil
				}
			}
		case <-t.C:
			sent := time.Now()
			kctx, kcancel := context.WithTimeout(ctx, attemptTimeout(w.req.TTL))
			ttls, err := w.b.keepAlive(kctx, []clientv3.LeaseID{w.h.leaseID()})
			kcancel()
			switch {
			case err == nil && ttls[w.h.leaseID()] <= 0:
				return nil // Acquire says what happened
			case err == nil:
				w.lastKA = sent
				w.h.kept(w.h.leaseID(), sent)
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				w.lastKA = time.Now().Add(-every + time.Second/4) // try again soon
			}
		}
	}
}

// Acquire checks, in one transaction, that the waiter's key still exists
// with its create revision and whether an older key is left, while a
// keep-alive of its lease, sent after the attempt began, confirms that etcd
// keeps the key for a full TTL from now.
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	b, h := w.b, w.h
	lp := b.lockPrefix(w.req.Name)
	sent := time.Now()
	lease := h.leaseID()
	actx, cancel := context.WithTimeout(ctx, attemptTimeout(w.req.TTL))
	defer cancel()
	kac := b.keepAliveAsync(actx, lease)
	mine := clientv3.Compare(clientv3.CreateRevision(h.key), "=", w.rev)
	tr, err := b.cli.Txn(actx).If(mine).
		Then(clientv3.OpGet(h.key),
			clientv3.OpGet(lp, clientv3.WithFirstCreate()...),
			clientv3.OpGet(lp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.rev-1))...)).
		Commit()
	ka := <-kac
	if err != nil {
		return dlock.Grant{}, w.failed(ctx, actx, "checking the queue", err)
	}
	if !tr.Succeeded {
		return dlock.Grant{}, w.gone(lease)
	}
	own, holder, pred := firstKV(tr, 0), firstKV(tr, 1), firstKV(tr, 2)
	sameLease := clientv3.LeaseID(own.Lease) == lease
	if sameLease && ka.err == nil && ka.ttl <= 0 {
		return dlock.Grant{}, w.gone(lease)
	}
	if ka.err == nil && ka.ttl > 0 {
		w.lastKA = ka.sent
		h.kept(lease, ka.sent)
	}
	if pred != nil {
		if holder != nil {
			if why := foreign(holder); why != "" {
				return dlock.Grant{}, foreignError(holder, why) // the Client cancels the waiter
			}
		}
		w.pred, w.predRev, w.seen, w.retry = string(pred.Key), pred.CreateRevision, tr.Header.Revision, 0
		return dlock.Grant{}, heldError(holder)
	}
	// The key is the lowest: the lock is ours once etcd keeps it a full TTL.
	if !sameLease {
		// A reentrant hold of the same owner, granted in the moment between
		// the key becoming the lowest and this check, moved it to a longer
		// lease.
		r := &renewal{h: h, owner: w.req.Owner, token: w.rev, need: w.need}
		b.renewAll(actx, []*renewal{r})
		if r.err != nil {
			if errors.Is(r.err, dlock.ErrLeaseLost) {
				return dlock.Grant{}, w.gone(lease)
			}
			return dlock.Grant{}, w.failed(ctx, actx, "keeping the lease alive", r.err)
		}
	} else if ka.err != nil {
		return dlock.Grant{}, w.failed(ctx, actx, "keeping the lease alive", ka.err)
	}
	if elapsed := time.Since(sent); late(elapsed, w.req.TTL) {
		// Still the lowest key: the next attempt, timed anew, grants it.
		return dlock.Grant{}, w.again("confirming the grant", fmt.Errorf("answered %v after the request, more than half the TTL", elapsed.Round(time.Millisecond)))
	}
	return dlock.Grant{Token: uint64(w.rev), Count: max(decode(own).Holds, 1), Handle: h}, nil
}

// failed turns an etcd error of an attempt into the waiter's answer: an
// error matching dlock.ErrNotAcquired if etcd could not answer for now, so
// that the Client waits (a moment) and tries again; the error otherwise.
func (w *waiter) failed(ctx, actx context.Context, what string, err error) error {
	if !retryable(ctx, actx, err) {
		return wrap(ctx, what, err)
	}
	return w.again(what, err)
}

// again makes the next Wait return after a short pause, for another
// attempt, and returns an error matching dlock.ErrNotAcquired so that the
// Client makes it.
func (w *waiter) again(what string, err error) error {
	w.retry++
	w.pred = ""
	return &kindError{kind: dlock.ErrNotAcquired, msg: fmt.Sprintf("etcd: %s failed (will retry)", what), err: err}
}

// gone is the error of a waiter whose key was deleted while it waited.
func (w *waiter) gone(lease clientv3.LeaseID) error {
	return lostf("etcd: the waiting request's key %s is gone: its lease %x expired or was revoked while it waited "+
		"(was the process paused or cut off from etcd for longer than the TTL of %ds?); the lock was NOT granted",
		w.h.key, int64(lease), w.need)
}

// Cancel withdraws the waiter: it deletes its key (or, if a reentrant hold
// of the same owner was added to it, takes one hold off) and revokes its
// lease.
func (w *waiter) Cancel(ctx context.Context) error {
	lease := w.h.leaseID()
	err := w.b.release(ctx, w.h, w.req.Owner, w.rev)
	if errors.Is(err, dlock.ErrLeaseLost) {
		w.b.revokeLater(lease)
		return nil
	}
	return err
}
