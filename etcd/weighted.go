package etcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/errkind"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The weighted kinds (semaphores, read-write locks, elections) use the
// mutex's keys, leases, renewals and releases; what differs is the value
// of a key (it also holds the kind, the name's limit and the key's
// weight), how a request is put, and what a waiter waits for. The package
// doc says why; the code is here.

var _ dlock.Granter = (*Backend)(nil)
var _ dlock.Downgrader = (*Backend)(nil)
var _ dlock.Proclaimer = (*Backend)(nil)

// CanGrant says yes to semaphores, read-write locks and elections with a
// limit of 1 to dlock.MaxLimit: etcd's transactions keep every rule of the
// contract for them (see the package doc).
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	switch {
	case kind > dlock.KindElection:
		return fmt.Errorf("%w: etcd: a %s is not a kind this backend knows", dlock.ErrInvalidOption, kind)
	case limit < 1 || limit > dlock.MaxLimit:
		return fmt.Errorf("%w: etcd: limit %d is outside [1, %d]", dlock.ErrInvalidOption, limit, dlock.MaxLimit)
	}
	return nil
}

// maxRounds bounds the transactions of one attempt of a weighted request
// whose reading of the queue went stale (keys were added meanwhile);
// after them the attempt is retried after a pause.
const maxRounds = 8

// weighted is one attempt of a weighted request. Its transaction puts the
// key if no key of the name was created after the revision at which the
// queue was last read (at first: if the name has no keys), and otherwise
// reads the queue, oldest first, at a new revision. From a reading it
// judges the request: a kind or limit other than the name's is refused, a
// holder of the same owner re-enters, a request that fits (the weights of
// all the keys and its own within the limit: no earlier waiter is passed)
// is put and granted, one that does not is refused or, when it waits, put
// and queued. A put that succeeds therefore found the name as read, less
// the keys deleted since, which only leaves more room. Uncontended this is
// one request; beside holders, two.
func (a *acquisition) weighted(actx context.Context, n int, h *handle) (result, outcome) {
	var (
		rev int64    // the queue was read at rev (0: not read; taken empty)
		st  standing // what the reading said
	)
	read := clientv3.OpGet(a.lp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	for range maxRounds {
		put := clientv3.OpPut(h.key, a.val, clientv3.WithLease(a.cur.id))
		none := clientv3.Compare(clientv3.CreateRevision(a.lp), "<", rev+1).WithPrefix()
		tr, next, err := a.commit(actx, h, none, []clientv3.Op{put}, []clientv3.Op{read})
		if next != proceed {
			return result{err: err}, next
		}
		if tr.Succeeded {
			token := tr.Header.Revision
			if rev == 0 || st.fits(a.req) {
				return a.granted(token, nil, h), final
			}
			a.clean, a.keep = false, true
			w := &waiter{b: a.b, req: a.req, need: a.need, h: h, ttl: a.cur.ttl, lastKA: a.cur.alive,
				rev: token, seen: rev, ahead: st.ahead}
			return result{w: w, err: st.held(a.req)}, final
		}
		rr := tr.Responses[0].GetResponseRange()
		rev = tr.Header.Revision
		st, err = scan(rr.Kvs, a.req, h.key)
		switch {
		case err != nil:
			return result{err: err}, final
		case st.own != nil:
			// An earlier attempt put the key and its answer was lost.
			if st.ownIn {
				return a.granted(st.own.CreateRevision, st.own, h), final
			}
			if !a.req.Wait {
				return result{err: st.held(a.req)}, final // settle deletes the key
			}
			a.clean, a.keep = false, true
			w := &waiter{b: a.b, req: a.req, need: a.need, h: h, ttl: a.cur.ttl, lastKA: a.cur.alive,
				rev: st.own.CreateRevision, seen: rev, ahead: st.ahead}
			return result{w: w, err: st.held(a.req)}, final
		case st.mine != nil:
			return a.reenterWeighted(n, st.mine)
		case !st.fits(a.req) && !a.req.Wait:
			return result{err: st.held(a.req)}, final
		}
	}
	a.lastErr = errors.New("etcd: the queue kept growing while the request was judged")
	return result{}, retry
}

// reenterWeighted adds a hold to kv, a granted key of the request's owner:
// the same token, the count one more. Asking more weight than the key
// holds is an upgrade, refused.
func (a *acquisition) reenterWeighted(n int, kv *mvccpb.KeyValue) (result, outcome) {
	if v := decode(kv); a.req.Weight > v.Weight {
		return result{err: fmt.Errorf("etcd: %q holds %d of the %s, asks %d: %w",
			v.Owner, v.Weight, dlock.Shape(v.Kind, v.Limit), a.req.Weight, dlock.ErrUpgrade)}, final
	}
	g, err := a.b.reenter(a.ctx, a.req, kv, a.need, "")
	if errors.Is(err, errHolderChanged) && n < 10 {
		a.lastErr = err
		return result{}, retry
	}
	return result{g: g, err: err}, final
}

// standing is what a reading of a weighted name's keys, oldest first,
// says of a request.
type standing struct {
	sum    int              // the weights of the keys before the request's own (all of them if it has none)
	used   int              // of those, the weights of the granted ones
	queued int              // the keys before it that are not granted
	head   *mvccpb.KeyValue // the oldest key
	mine   *mvccpb.KeyValue // the oldest granted key of the request's owner
	own    *mvccpb.KeyValue // the request's own key, if read
	ownIn  bool             // own is granted
	ahead  *ahead           // the keys before own (all of them if it has none)
}

// fits reports whether a key of req put after the keys read is granted.
func (st standing) fits(req dlock.Request) bool { return st.sum+req.Weight <= req.Limit }

// scan judges req against kvs, a weighted name's keys oldest first (all of
// them, or those before the request's own key ownKey). With strict FIFO
// the granted keys are always a prefix of the queue, so a key is granted
// exactly when the weights of the keys up to and including it fit in the
// limit. A key dlock did not write is an error matching
// dlock.ErrForeignData; a kind or limit other than req's is a
// *dlock.ConflictError. A mutex's key behind the oldest is a mutex request
// that found the name weighted and is deleting its key: it is left out.
func scan(kvs []*mvccpb.KeyValue, req dlock.Request, ownKey string) (standing, error) {
	st := standing{ahead: newAhead(req)}
	for i, kv := range kvs {
		if why := foreign(kv); why != "" {
			return st, foreignError(kv, why)
		}
		v := decode(kv)
		if v.Kind == dlock.KindMutex {
			if i == 0 {
				return st, dlock.Conflict(dlock.KindMutex, 1, req)
			}
			continue
		}
		if err := dlock.Conflict(v.Kind, v.Limit, req); err != nil {
			return st, err
		}
		if st.head == nil {
			st.head = kv
		}
		if string(kv.Key) == ownKey {
			st.own, st.ownIn = kv, st.sum+v.Weight <= req.Limit
			break
		}
		st.sum += v.Weight
		if st.sum > req.Limit {
			st.queued++
		} else {
			st.used += v.Weight
			if st.mine == nil && v.Owner == req.Owner {
				st.mine = kv
			}
		}
		st.ahead.add(kv, v.Weight)
	}
	return st, nil
}

// held is the refusal of req by the name as read: what is held of the
// limit, the waiters first, and the oldest key's holder.
func (st standing) held(req dlock.Request) error {
	e := &dlock.HeldError{}
	if st.head != nil {
		e.Holder = dlock.Holder{Owner: decode(st.head).Owner, Token: uint64(st.head.CreateRevision)}
	}
	if req.Limit > 1 {
		e.Held, e.Limit, e.Queued = st.used, req.Limit, st.queued
	}
	return e
}

// ahead is what a weighted waiter knows of the keys before its own: their
// create revisions and weights as read, less what the backend's watch saw
// deleted or lowered since (see watchHub). Keys only join a queue at its
// end and no key's weight ever grows, so the sum is an upper bound of the
// weight before the waiter, exact while the watch misses nothing.
type ahead struct {
	keys map[string]aheadKey
	sum  int // the keys' weights
	room int // the name's limit less the waiter's weight: it fits when sum <= room
}

type aheadKey struct {
	rev    int64 // create revision
	weight int
}

func newAhead(req dlock.Request) *ahead {
	return &ahead{keys: make(map[string]aheadKey), room: req.Limit - req.Weight}
}

func (ah *ahead) add(kv *mvccpb.KeyValue, weight int) {
	ah.keys[string(kv.Key)] = aheadKey{rev: kv.CreateRevision, weight: weight}
	ah.sum += weight
}

// drop forgets key, which was deleted.
func (ah *ahead) drop(key string) {
	if k, ok := ah.keys[key]; ok {
		delete(ah.keys, key)
		ah.sum -= k.weight
	}
}

// lower records that key, created at rev, now weighs weight (a
// downgrade); a key created at another revision is a new use of the name,
// so the one read was deleted.
func (ah *ahead) lower(key string, rev int64, weight int) {
	k, ok := ah.keys[key]
	switch {
	case !ok:
	case k.rev != rev:
		ah.drop(key)
	case weight < k.weight:
		ah.sum -= k.weight - weight
		ah.keys[key] = aheadKey{rev: rev, weight: weight}
	}
}

// fits reports whether the waiter fits beside the keys before it.
func (ah *ahead) fits() bool { return ah.sum <= ah.room }

// aheadOp reads the keys before the waiter's, oldest first.
func (w *waiter) aheadOp(lp string, opts []clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(lp, append(opts, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(w.rev-1),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))...)
}

// judge reads rr, the keys before a weighted waiter's read at revision
// rev: nil if the waiter fits, and otherwise the refusal, after which the
// waiter waits on what it read.
func (w *waiter) judge(rr *etcdserverpb.RangeResponse, rev int64) error {
	var kvs []*mvccpb.KeyValue
	if rr != nil {
		kvs = rr.Kvs
	}
	st, err := scan(kvs, w.req, w.h.key)
	if err != nil {
		return err // the Client cancels the waiter
	}
	if st.fits(w.req) {
		return nil
	}
	w.ahead, w.seen, w.retry = st.ahead, rev, 0
	return st.held(w.req)
}

// Downgrade lowers the weight of the hold h to weight in place (a writer
// becoming a reader) with [Backend.rewrite]: the key keeps its place in
// the queue, its lease and its token; the waiters that now fit see the
// change through their watch. A weight above the hold's is refused
// (matching dlock.ErrUpgrade); a key that is gone or not h's is
// dlock.ErrLeaseLost.
func (b *Backend) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	return b.rewrite(ctx, h, "downgrading", func(key string, v *value) (bool, error) {
		switch {
		case v.Kind == dlock.KindMutex:
			return false, errkind.Errorf(dlock.ErrInvalidOption, "etcd: key %s is a mutex's; it has no weight to lower", key)
		case weight < 1 || weight > v.Weight:
			return false, fmt.Errorf("etcd: key %s holds %d, asks %d: %w", key, v.Weight, weight, dlock.ErrUpgrade)
		case weight == v.Weight:
			return false, nil
		}
		v.Weight = weight
		return true, nil
	})
}

// Proclaim replaces the value that the hold h, an election's leader,
// publishes, with [Backend.rewrite]: the key keeps its lease and its
// token, and the name's watchers see the put. A key that is gone or not
// h's is dlock.ErrLeaseLost.
func (b *Backend) Proclaim(ctx context.Context, h dlock.Hold, val string) error {
	return b.rewrite(ctx, h, "proclaiming", func(key string, v *value) (bool, error) {
		if v.Kind != dlock.KindElection {
			return false, errkind.Errorf(dlock.ErrInvalidOption, "etcd: key %s is a %s's, not an election's", key, v.Kind)
		}
		v.Value = val
		return true, nil
	})
}

// rewrite changes the value of the key of hold h in place: one read of
// the key and a transaction that puts what change made of its value only
// if the key is still h's (its create revision, the token) and unchanged
// since the read, so that nothing comes in between; change returns false
// to leave the key as it is. A key that is gone or not h's is
// dlock.ErrLeaseLost.
func (b *Backend) rewrite(ctx context.Context, h dlock.Hold, what string, change func(key string, v *value) (bool, error)) error {
	hd, err := b.resolve(ctx, h)
	if err != nil {
		return err
	}
	token := int64(h.Token)
	for range 10 {
		resp, err := b.cli.Get(ctx, hd.key)
		if err != nil {
			return wrap(ctx, what, err)
		}
		it := &renewal{h: hd, owner: h.Owner, token: token}
		if len(resp.Kvs) > 0 {
			it.kv = resp.Kvs[0]
		}
		if it.check() {
			return it.err
		}
		v := decode(it.kv)
		if put, err := change(hd.key, &v); !put || err != nil {
			return err
		}
		tr, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(hd.key), "=", token),
				clientv3.Compare(clientv3.ModRevision(hd.key), "=", it.kv.ModRevision)).
			Then(clientv3.OpPut(hd.key, encodeValue(v), clientv3.WithIgnoreLease())).
			Commit()
		if err != nil {
			return wrap(ctx, what, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("etcd: %s: the key kept changing", what)
}
