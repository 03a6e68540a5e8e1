package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/dur"
	"github.com/dlock-dev/dlock/internal/errkind"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

	// older is every key before the waiter's at revision olderRev, when
	// there were at most maxOlder (nil otherwise: then the waiter watches
	// its predecessor only). Keys only ever join a
	// queue at its end, so once the backend's watch has seen all of them
	// deleted, and not the waiter's own, the waiter's key is the lowest:
	// lowest says so, and a fresh shared lease then grants it without a
	// read of the queue.
	older    []string
	olderRev int64
	lowest   bool

	// ahead is, for a weighted kind, the keys before the waiter's as read
	// at revision seen (nil for a mutex: see weighted.go). Such a waiter
	// waits until they fit, as the backend's watch of the lock's prefix
	// tells, and sets lowest when the watch missed nothing.
	ahead *ahead
}

// maxOlder is how many keys before its own an enqueued waiter reads: a
// waiter with more before it watches only its predecessor.
const maxOlder = 8

// olderAt records the keys before the waiter's, read at revision rev
// newest first, if rr holds them all.
func (w *waiter) olderAt(rr *etcdserverpb.RangeResponse, rev int64) {
	w.older = nil
	if rr == nil || rr.More || rr.Count > int64(len(rr.Kvs)) {
		return
	}
	for _, kv := range rr.Kvs {
		if kv.CreateRevision < w.rev {
			w.older = append(w.older, string(kv.Key))
		}
	}
	w.olderRev = rev
}

// Wait returns when the predecessor's key is deleted (or the backend's
// watch of the lock ends for another reason), keeping the waiter's lease
// alive meanwhile.
//
// The deletion comes from the backend's long-lived watch of the lock's
// prefix (see watchHub), so a wait costs etcd no request. When that watch
// cannot tell whether the predecessor was deleted since the revision at
// which it was seen (the watch is newer, or forgot that far back), a read
// of the predecessor does.
func (w *waiter) Wait(ctx context.Context) error {
	if w.retry > 0 {
		return dur.Sleep(ctx, backoff(w.retry))
	}
	var sub *subscription
	if w.ahead != nil {
		sub = w.b.hub.subscribeAhead(w.b.lockPrefix(w.req.Name), w.h.key, w.rev, w.seen, w.ahead)
	} else {
		if w.pred == "" {
			return ctx.Err()
		}
		// A waiter near the head of the queue watches the lock's prefix,
		// where it sees all the keys before its own go; one further back
		// watches only its predecessor, so that a release is not sent to
		// every client of a long queue.
		target := w.pred
		if w.older != nil {
			target = w.b.lockPrefix(w.req.Name)
		}
		sub = w.b.hub.subscribe(target, w.pred, w.seen)
	}
	defer sub.stop()
	every := max(time.Duration(w.ttl)*time.Second/3, 100*time.Millisecond)
	for {
		t := time.NewTimer(time.Until(w.lastKA.Add(every)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-sub.woken:
			t.Stop()
			if sub.ended {
				// The watch ended (no leader, a compaction): a pause, so
				// that a watch that cannot last is not reopened in a loop.
				return dur.Sleep(ctx, backoff(1))
			}
			if w.ahead != nil {
				w.lowest = sub.fit
			} else {
				w.lowest = w.older != nil && sub.allGone(w.older, w.olderRev, w.h.key, w.rev)
			}
			return nil
		case <-sub.read:
			t.Stop()
			gctx, gcancel := context.WithTimeout(ctx, attemptTimeout(w.req.TTL))
			g, err := w.b.cli.Get(gctx, w.pred)
			gcancel()
			if err != nil || len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != w.predRev {
				return ctx.Err() // gone, or look again
			}
			sub.confirm(g.Header.Revision)
		case <-t.C:
			if l, ok := w.b.freshShared(w.h.leaseID()); ok {
				// Another request of the backend kept the lease alive.
				w.lastKA = l.alive
				w.h.kept(l.id, l.alive)
				continue
			}
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
// keeps the key for a full TTL from now; a shared lease confirmed within
// the last eighth of its TTL needs none, and the grant counts from that
// confirmation (Grant.Age).
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	b, h := w.b, w.h
	if w.lowest {
		w.lowest = false
		if l, ok := b.freshShared(h.leaseID()); ok {
			// The watch saw the waiter's key become the lowest; the
			// lease's last confirmation, within an eighth of its TTL,
			// says the key lives a TTL from then.
			w.lastKA = l.alive
			h.kept(l.id, l.alive)
			b.track(h)
			return dlock.Grant{Token: uint64(w.rev), Count: 1, Handle: h, Age: max(time.Since(l.alive), 0)}, nil
		}
	}
	lp := b.lockPrefix(w.req.Name)
	sent := time.Now()
	lease := h.leaseID()
	actx, cancel := context.WithTimeout(ctx, attemptTimeout(w.req.TTL))
	defer cancel()
	kac := b.confirmAsync(actx, lease)
	tr, err := w.check(actx, lp, true)
	if err == nil && !tr.Succeeded {
		// The member may not have seen the key's creation yet.
		tr, err = w.check(actx, lp, false)
	}
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
	if w.ahead != nil {
		if err := w.judge(tr.Responses[1].GetResponseRange(), tr.Header.Revision); err != nil {
			return dlock.Grant{}, err
		}
	} else if pred != nil {
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
	g := dlock.Grant{Token: uint64(w.rev), Count: max(decode(own).Holds, 1), Handle: h}
	if sameLease {
		g.Age = max(sent.Sub(ka.sent), 0) // confirmed before the attempt: counts from then
	}
	b.track(h)
	return g, nil
}

// check reads, in one transaction if the waiter's key exists with its
// create revision, the key, the holder and the waiter's predecessor. A
// serializable read (from the member's own state, without a round through
// the leader) is enough once the key exists in it: keys older than the
// waiter's can only go, never come, so if the member's state has none,
// none is left.
func (w *waiter) check(ctx context.Context, lp string, serializable bool) (*clientv3.TxnResponse, error) {
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	mine := clientv3.Compare(clientv3.CreateRevision(w.h.key), "=", w.rev)
	if w.ahead != nil {
		return w.b.cli.Txn(ctx).If(mine).Then(clientv3.OpGet(w.h.key, opts...), w.aheadOp(lp, opts)).Commit()
	}
	return w.b.cli.Txn(ctx).If(mine).
		Then(clientv3.OpGet(w.h.key, opts...),
			clientv3.OpGet(lp, append(clientv3.WithFirstCreate(), opts...)...),
			clientv3.OpGet(lp, append(clientv3.WithLastCreate(), append(opts, clientv3.WithMaxCreateRev(w.rev-1))...)...)).
		Commit()
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
	return errkind.Errorf(dlock.ErrNotAcquired, "etcd: %s failed (will retry): %w", what, err)
}

// gone is the error of a waiter whose key was deleted while it waited.
func (w *waiter) gone(lease clientv3.LeaseID) error {
	return lostf("etcd: the waiting request's key %s is gone: its lease %x expired or was revoked while it waited "+
		"(was the process paused or cut off from etcd for longer than the TTL of %ds?); the lock was NOT granted",
		w.h.key, int64(lease), w.need)
}

// Cancel withdraws the waiter: it deletes its key (or, if a reentrant hold
// of the same owner was added to it, takes one hold off); when that fails,
// the key is deleted in the background.
func (w *waiter) Cancel(ctx context.Context) error {
	lease := w.h.leaseID()
	err := w.b.release(ctx, w.h, w.req.Owner, w.rev)
	switch {
	case errors.Is(err, dlock.ErrLeaseLost):
		w.b.revokeLater(lease)
		return nil
	case err != nil:
		// Nothing else would: the shared lease outlives the waiter.
		w.b.deleteLater(w.h.key)
	}
	return err
}
