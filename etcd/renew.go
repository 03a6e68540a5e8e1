package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAlive renews the leases ids once (see keepAlives.keepAlive) and
// notes what it learnt of the shared leases.
func (b *Backend) keepAlive(ctx context.Context, ids []clientv3.LeaseID) (map[clientv3.LeaseID]int64, error) {
	sent := time.Now()
	ttls, err := b.ka.keepAlive(ctx, ids)
	b.noteKeepAlive(ttls, sent)
	return ttls, err
}

// renewal is one hold to renew: its handle, owner and token, and the TTL
// in whole seconds it needs from now. err is the outcome.
type renewal struct {
	h     *handle
	owner string
	token int64
	need  int64
	err   error

	kv     *mvccpb.KeyValue // the key as read
	listed bool             // kv stands for the key found in a listing of its lease
	seen   uint64           // when kv was found (see handle.checked)
	adopt  bool             // the key is on another lease than the handle's
	move   bool             // the key's lease is shorter than needed
}

// Renew keeps the lease of h alive and checks that h's key is still there
// and h's: one keep-alive and one read, sent together. A lease that etcd
// no longer knows, or a key that is gone or not h's, is an error matching
// dlock.ErrLeaseLost. A ttl longer than the lease's moves the key onto a new
// lease of that TTL (rounded up to whole seconds).
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	return b.RenewBatch(ctx, []dlock.Renewal{{Hold: h, TTL: ttl}})[0]
}

// RenewBatch renews many holds with one keep-alive stream for all their
// leases and one read transaction per 100 keys, checking each hold as Renew
// does.
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	items := make([]*renewal, 0, len(rs))
	idx := make([]int, 0, len(rs))
	for i, r := range rs {
		hd, err := b.resolve(ctx, r.Hold)
		if err != nil {
			errs[i] = err
			continue
		}
		items = append(items, &renewal{h: hd, owner: r.Hold.Owner, token: int64(r.Hold.Token), need: ttlSeconds(r.TTL)})
		idx = append(idx, i)
	}
	b.renewAll(ctx, items)
	for j, it := range items {
		errs[idx[j]] = it.err
	}
	return errs
}

// resolve returns the handle of h: its own, or, for a hold made elsewhere
// (by name, owner and token only), one found by the token, which is the
// key's create revision.
func (b *Backend) resolve(ctx context.Context, h dlock.Hold) (*handle, error) {
	if hd, ok := h.Handle.(*handle); ok && hd != nil && hd.name == h.Name {
		return hd, nil
	}
	if h.Token == 0 || h.Token > 1<<62 {
		return nil, lostf("etcd: no acquisition has token %d", h.Token)
	}
	rev := int64(h.Token)
	checked := b.listed.epoch()
	resp, err := b.cli.Get(ctx, b.lockPrefix(h.Name), clientv3.WithPrefix(),
		clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return nil, wrap(ctx, "looking up the hold", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, lostf("etcd: the key of token %d is gone: its lease expired or was revoked, or it was released", h.Token)
	}
	kv := resp.Kvs[0]
	return &handle{name: h.Name, key: string(kv.Key), lease: clientv3.LeaseID(kv.Lease), resolved: true, checked: checked}, nil
}

// renewAll renews the items, setting each one's err.
func (b *Backend) renewAll(ctx context.Context, items []*renewal) {
	if len(items) == 0 {
		return
	}
	// A request that etcd does not answer soon (one that went to a leader
	// that just died waits for etcd's request timeout, 5 s or more) is
	// given up early enough for the Client to try again within the TTL.
	shortest := items[0].need
	for _, it := range items {
		shortest = min(shortest, it.need)
	}
	ctx, cancel := context.WithTimeout(ctx, min(max(time.Duration(shortest)*time.Second/4, 250*time.Millisecond), 5*time.Second))
	defer cancel()
	ids := make([]clientv3.LeaseID, len(items))
	for i, it := range items {
		ids[i] = it.h.leaseID()
	}
	var (
		ttls  map[clientv3.LeaseID]int64
		kaErr error
		wg    sync.WaitGroup
	)
	sent := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		ttls, kaErr = b.keepAlive(ctx, ids)
	}()
	err := b.readHeld(ctx, items, ids)
	wg.Wait()
	if err != nil {
		err = wrap(ctx, "reading the keys of held locks", err)
		for _, it := range items {
			it.err = err
		}
		return
	}
	var adopt []*renewal
	for i, it := range items {
		if !it.listed && it.check() {
			continue
		}
		if clientv3.LeaseID(it.kv.Lease) != ids[i] {
			it.adopt = true
			adopt = append(adopt, it)
			continue
		}
		it.judge(ctx, ttls, kaErr, sent)
	}
	if len(adopt) > 0 {
		// Another hold of the same key (a reentrant owner elsewhere) moved
		// it to a longer lease: keep that one alive from now on.
		ids = ids[:0]
		for _, it := range adopt {
			it.h.setLease(clientv3.LeaseID(it.kv.Lease), time.Time{})
			ids = append(ids, clientv3.LeaseID(it.kv.Lease))
		}
		sent = time.Now()
		ttls, kaErr = b.keepAlive(ctx, ids)
		for _, it := range adopt {
			it.judge(ctx, ttls, kaErr, sent)
		}
	}
	for _, it := range items {
		if it.move && it.err == nil {
			it.err = b.moveLease(ctx, it)
		}
		if it.err == nil {
			it.h.seen(it.seen)
		}
	}
}

// check sets it.err if the key read is not the hold's, and reports whether
// it did.
func (it *renewal) check() bool {
	kv := it.kv
	switch v := decode(kv); {
	case kv == nil || kv.CreateRevision != it.token:
		it.err = lostf("etcd: the key of token %d is gone: its lease expired or was revoked, or it was deleted", it.token)
	case v.Owner != it.owner:
		it.err = lostf("etcd: key %s is held by %q, not %q", kv.Key, v.Owner, it.owner)
	case kv.Lease == 0:
		it.err = lostf("etcd: key %s is no longer bound to a lease", kv.Key)
	default:
		return false
	}
	return true
}

// judge sets the outcome of the keep-alive of the key's lease.
func (it *renewal) judge(ctx context.Context, ttls map[clientv3.LeaseID]int64, kaErr error, sent time.Time) {
	id := clientv3.LeaseID(it.kv.Lease)
	ttl, ok := ttls[id]
	switch {
	case ok && ttl <= 0:
		it.err = lostf("etcd: lease %x of key %s expired or was revoked", int64(id), it.kv.Key)
	case !ok && kaErr != nil:
		it.err = wrap(ctx, "keeping a lease alive", kaErr)
	case !ok:
		it.err = wrap(ctx, "keeping a lease alive", fmt.Errorf("no answer for lease %x", int64(id)))
	case ttl < it.need:
		it.move = true
	default:
		it.h.kept(id, sent)
	}
}

// maxTxnOps is how many operations go into one transaction (etcd's
// --max-txn-ops defaults to 128).
const maxTxnOps = 100

// readHeld finds the key of each item (on lease ids[i]) and sets its kv
// (nil if the key is gone) and seen. When more than maxTxnOps of them are
// on one shared lease, a listing of the keys etcd has attached to that
// lease (see Backend.listing) stands for their reads: a key of this
// backend's acquisition (its name is unique among its live keys) attached
// to the backend's lease exists and is the hold's, since the backend uses
// a key again only after the hold's release deleted it (keyPool). The
// other keys, and those the listing lacks, are read.
func (b *Backend) readHeld(ctx context.Context, items []*renewal, ids []clientv3.LeaseID) error {
	per := make(map[clientv3.LeaseID][]int)
	for i, id := range ids {
		per[id] = append(per[id], i)
	}
	var rest []int
	for id, is := range per {
		if len(is) <= maxTxnOps || !b.isShared(id) {
			rest = append(rest, is...)
			continue
		}
		after, need := uint64(0), items[is[0]].need
		for _, i := range is {
			after, need = max(after, items[i].h.lastChecked()), min(need, items[i].need)
		}
		l, err := b.listing(ctx, id, after, listingMaxAge(need))
		if err != nil {
			return err
		}
		for _, i := range is {
			it := items[i]
			if !l.has(b.listed.seed, it.h.key) {
				rest = append(rest, i)
				continue
			}
			it.kv = &mvccpb.KeyValue{Key: []byte(it.h.key), CreateRevision: it.token, Lease: int64(id)}
			it.listed, it.seen = true, l.seq
		}
	}
	epoch := b.listed.epoch()
	keys := make([]string, len(rest))
	for j, i := range rest {
		keys[j] = items[i].h.key
	}
	kvs, err := b.read(ctx, keys)
	if err != nil {
		return err
	}
	for _, i := range rest {
		items[i].kv, items[i].seen = kvs[items[i].h.key], epoch
	}
	return nil
}

// listingMaxAge is how old a listing of the keys on a shared lease may be
// for renewals of TTL need (seconds): half the renewal period.
func listingMaxAge(need int64) time.Duration {
	return time.Duration(need) * time.Second / 6
}

// readParallel is how many read transactions of one renewal are in
// flight at once.
const readParallel = 8

// read reads keys with linearizable reads, one transaction per 100 keys
// (up to readParallel at once), and returns those that exist.
func (b *Backend) read(ctx context.Context, keys []string) (map[string]*mvccpb.KeyValue, error) {
	out := make(map[string]*mvccpb.KeyValue, len(keys))
	if len(keys) == 1 {
		resp, err := b.cli.Get(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) > 0 {
			out[keys[0]] = resp.Kvs[0]
		}
		return out, nil
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, readParallel)
	)
	for len(keys) > 0 {
		n := min(len(keys), maxTxnOps)
		chunk := keys[:n]
		keys = keys[n:]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ops := make([]clientv3.Op, len(chunk))
			for i, k := range chunk {
				ops[i] = clientv3.OpGet(k)
			}
			tr, err := b.cli.Txn(ctx).Then(ops...).Commit()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				return
			}
			for i := range chunk {
				if kv := firstKV(tr, i); kv != nil {
					out[string(kv.Key)] = kv
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// moveLease moves the key of it onto a new lease of it.need seconds: etcd
// cannot change a lease's TTL. The key keeps its create revision (and so
// its place and token); the compare on its lease makes the move atomic. A
// keep-alive of the new lease after the move makes its expiry later than
// any renewal of the old lease that a reentrant hold of the same key
// elsewhere may have made meanwhile. The old lease is left to expire: such
// a hold may still be keeping it alive, and learns of the move at its next
// renewal.
func (b *Backend) moveLease(ctx context.Context, it *renewal) error {
	lr, err := b.cli.Grant(ctx, it.need)
	if err != nil {
		return wrap(ctx, "granting a longer lease", err)
	}
	cur := clientv3.LeaseID(it.kv.Lease)
	for range 5 {
		tr, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(it.h.key), "=", it.token),
				clientv3.Compare(clientv3.LeaseValue(it.h.key), "=", cur)).
			Then(clientv3.OpPut(it.h.key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lr.ID))).
			Else(clientv3.OpGet(it.h.key)).
			Commit()
		if err != nil {
			b.revokeLater(lr.ID)
			return wrap(ctx, "moving a key to a longer lease", err)
		}
		if tr.Succeeded {
			it.h.setLease(lr.ID, time.Time{})
			sent := time.Now()
			ttls, err := b.keepAlive(ctx, []clientv3.LeaseID{lr.ID})
			if err != nil {
				return wrap(ctx, "keeping a lease alive", err)
			}
			if ttls[lr.ID] <= 0 {
				return lostf("etcd: lease %x of key %s expired or was revoked", int64(lr.ID), it.h.key)
			}
			it.h.kept(lr.ID, sent)
			return nil
		}
		it.kv = firstKV(tr, 0)
		if it.check() {
			b.revokeLater(lr.ID)
			return it.err
		}
		cur = clientv3.LeaseID(it.kv.Lease)
	}
	b.revokeLater(lr.ID)
	return errors.New("etcd: the key's lease kept changing; retrying")
}

// Release takes one hold off h's key: it deletes the key when this was the
// last hold (and then, unless it is a shared lease, revokes its lease in
// the background) and otherwise
// decrements the hold count, in a transaction that compares the key's create
// revision (the token) and, for the count, its mod revision. A key that is
// gone or not h's is an error matching dlock.ErrLeaseLost and nothing is
// changed.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	hd, err := b.resolve(ctx, h)
	if err != nil {
		return err
	}
	err = b.release(ctx, hd, h.Owner, int64(h.Token))
	if err == nil || errors.Is(err, dlock.ErrLeaseLost) {
		// Otherwise the key stays tracked, and sweep deletes it once
		// its TTL has passed without a renewal.
		b.untrack(hd)
	}
	return err
}

func (b *Backend) release(ctx context.Context, h *handle, owner string, token int64) error {
	key := h.key
	if h.fresh && b.reent.beginDelete(key) {
		return b.releaseFresh(ctx, h)
	}
	same := clientv3.Compare(clientv3.CreateRevision(key), "=", token)
	// The common case, a single hold, in one request: a key last modified
	// at its creation, at the token, holds the one hold its acquisition
	// wrote, for that acquisition's owner (the value is compared too when
	// the hold was found by its token only), and is on the shared lease it
	// was put on.
	cmp := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", token)}
	if h.resolved {
		cmp = append(cmp, clientv3.Compare(clientv3.Value(key), "=", encode(owner, 1)))
	}
	tr, err := b.cli.Txn(ctx).
		If(cmp...).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	for attempt := 0; ; attempt++ {
		if err != nil {
			return wrap(ctx, "releasing", err)
		}
		if tr.Succeeded {
			if dr := tr.Responses[0].GetResponseDeleteRange(); dr != nil {
				if dr.Deleted > 0 {
					b.reent.forget(key)
				}
				for _, kv := range dr.PrevKvs {
					b.revokeLater(clientv3.LeaseID(kv.Lease)) // unless shared
				}
				if dr.Deleted > 0 && h.free() {
					b.keys.put(h.name, key)
				}
			}
			return nil
		}
		it := &renewal{h: h, owner: owner, token: token, kv: firstKV(tr, 0)}
		if it.check() {
			return it.err
		}
		if attempt == 10 {
			return errors.New("etcd: releasing: the key kept changing")
		}
		op := clientv3.OpDelete(key, clientv3.WithPrevKV())
		if v := decode(it.kv); v.Holds > 1 {
			v.Holds-- // the value is otherwise kept (a weighted kind's shape)
			op = clientv3.OpPut(key, encodeValue(v), clientv3.WithIgnoreLease())
		}
		tr, err = b.cli.Txn(ctx).
			If(same, clientv3.Compare(clientv3.ModRevision(key), "=", it.kv.ModRevision)).
			Then(op).
			Else(clientv3.OpGet(key)).
			Commit()
	}
}

// releaseFresh releases h, a hold of a fresh owner (dlock.Request.Fresh)
// that no reentry through this backend touched, with a plain deletion of
// its key: no other hold can share the key, so there is nothing to
// compare. On etcd 3.4 a transaction costs the server a copy of its
// whole write buffer (every write transaction reads through a copy of
// the pending writes), so a deletion is what keeps a release as cheap as
// concurrency.Mutex's Unlock. A key that is gone was lost.
func (b *Backend) releaseFresh(ctx context.Context, h *handle) error {
	defer b.reent.endDelete(h.key)
	lease := h.leaseID()
	dr, err := b.cli.Delete(ctx, h.key)
	if err != nil {
		return wrap(ctx, "releasing", err)
	}
	if dr.Deleted == 0 {
		return lostf("etcd: the key %s is gone: its lease expired or was revoked, or it was deleted", h.key)
	}
	b.revokeLater(lease) // unless shared: a renewal moved the key to a lease of its own
	if h.free() {
		b.keys.put(h.name, h.key)
	}
	return nil
}

// reentries keeps apart the two ways of releasing a key of a fresh owner:
// the plain deletion (releaseFresh), while no reentry through this backend
// added a hold to the key, and the comparing transaction, once one did. A
// fresh owner's key can only be re-entered through the backend that
// acquired it (dlock.Request.Fresh), so it knows every reentry.
type reentries struct {
	mu sync.Mutex
	// m is true for a key that a reentry touched (until a release deletes
	// it), false while a plain deletion of it is in flight.
	m map[string]bool
}

// beginDelete reports whether key may be released by a plain deletion,
// and if so marks the deletion in flight until endDelete.
func (r *reentries) beginDelete(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[key]; ok {
		return false // re-entered, or a deletion in flight (a second release)
	}
	if r.m == nil {
		r.m = make(map[string]bool)
	}
	r.m[key] = false
	return true
}

func (r *reentries) endDelete(key string) {
	r.mu.Lock()
	if in, ok := r.m[key]; ok && !in {
		delete(r.m, key)
	}
	r.mu.Unlock()
}

// reenter marks key as re-entered, unless a plain deletion of it is in
// flight: then it reports false, and the reentry must not touch the key
// (it is being deleted, and its holder's release would not count the
// reentry's hold).
func (r *reentries) reenter(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in, ok := r.m[key]; ok && !in {
		return false
	}
	if r.m == nil {
		r.m = make(map[string]bool)
	}
	r.m[key] = true
	return true
}

// forget drops key, which a release deleted.
func (r *reentries) forget(key string) {
	r.mu.Lock()
	delete(r.m, key)
	r.mu.Unlock()
}
