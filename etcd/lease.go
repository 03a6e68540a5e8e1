package etcd

import (
	"context"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle is the backend's state of a hold (dlock.Grant.Handle) or of a
// waiter: the key of the acquisition and the lease it is attached to now.
// Reentrant holds of one key share nothing but the key; each has its own
// handle.
type handle struct {
	name  string
	key   string
	need  int64 // the TTL asked for, whole seconds
	reuse bool  // the key was put by one answered request: see keyPool
	// resolved: the hold was found by its token, not made by this backend
	resolved bool
	// fresh: the acquisition's owner was fresh (dlock.Request.Fresh), so
	// only a reentry through this backend can share the key (see reentries)
	fresh bool

	// mu guards the fields below; swept and freed sit above it, where the
	// padding after the flags has room for them (a hold's handle is kept
	// for as long as it is held, by the 100,000).
	swept bool // sweep deletes the key
	freed bool // the key was deleted at its release and may be used again
	mu    sync.Mutex
	lease clientv3.LeaseID // the lease the key is on
	alive time.Time        // send time of the last grant or keep-alive of lease that etcd answered
	// checked says when the key was last found there: by the listing of
	// that number, or by a request sent before listing checked+1 was (see
	// listings.epoch).
	checked uint64
}

// seen records that the key was found there as checked says.
func (h *handle) seen(checked uint64) {
	h.mu.Lock()
	h.checked = max(h.checked, checked)
	h.mu.Unlock()
}

func (h *handle) lastChecked() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checked
}

// free records that the release of h deleted its key, and reports whether
// the key may be used again: not when sweep deletes it too (its plain
// deletion could hit the key's next use).
func (h *handle) free() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := h.reuse && !h.swept && !h.freed
	h.freed = true
	return ok
}

func (h *handle) leaseID() clientv3.LeaseID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// setLease records that the key is on lease id, alive at the time given.
func (h *handle) setLease(id clientv3.LeaseID, alive time.Time) {
	h.mu.Lock()
	h.lease, h.alive = id, alive
	h.mu.Unlock()
}

// kept records a successful keep-alive of id sent at sent.
func (h *handle) kept(id clientv3.LeaseID, sent time.Time) {
	h.mu.Lock()
	if h.lease == id && sent.After(h.alive) {
		h.alive = sent
	}
	h.mu.Unlock()
}

// sharedLease is the backend's lease for one TTL: the keys of all its
// acquisitions of that TTL, held or waiting, are on it, so that an
// acquisition needs no grant of its own, a release no revocation, and one
// keep-alive renews every hold. Each key is still checked on its own at
// every renewal, so a hold learns of its own loss (its key deleted) and of
// the lease's.
type sharedLease struct {
	id    clientv3.LeaseID
	ttl   int64     // granted, seconds
	alive time.Time // send time of the last grant or keep-alive etcd answered
}

// fresh reports whether the lease was confirmed alive so recently that an
// acquisition may count its grant from then (Grant.Age) instead of
// confirming it with a keep-alive of its own: within an eighth of its TTL.
func (l sharedLease) fresh(now time.Time) bool {
	return now.Sub(l.alive) < time.Duration(l.ttl)*time.Second/8
}

// tracked is the backend's holds on its shared leases, for sweep.
type tracked struct {
	mu    sync.Mutex
	m     map[*handle]struct{}
	swept time.Time
}

// track records a hold granted on a shared lease, until untrack.
func (b *Backend) track(h *handle) {
	t := &b.tracked
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[*handle]struct{})
	}
	t.m[h] = struct{}{}
	t.mu.Unlock()
}

// untrack forgets a hold that was released or lost.
func (b *Backend) untrack(h *handle) {
	t := &b.tracked
	t.mu.Lock()
	delete(t.m, h)
	t.mu.Unlock()
}

// sweep deletes, at most once a second, the keys on shared leases whose
// holds were last confirmed alive more than their TTL ago: the Client
// has given them up (a renewal or release that failed), and the shared
// lease, kept alive for the other holds, would otherwise keep them, and
// their locks, for ever. A lease of its own would have expired by then.
func (b *Backend) sweep(shared map[clientv3.LeaseID]bool) {
	t := &b.tracked
	now := time.Now()
	t.mu.Lock()
	if now.Sub(t.swept) < time.Second || len(t.m) == 0 {
		t.mu.Unlock()
		return
	}
	t.swept = now
	stale := make(map[string][]*handle)
	for h := range t.m {
		h.mu.Lock()
		if shared[h.lease] && !h.freed && now.Sub(h.alive) > time.Duration(h.need)*time.Second {
			stale[h.key] = append(stale[h.key], h)
		}
		h.mu.Unlock()
	}
	if len(stale) > 0 {
		for h := range t.m {
			// A reentrant hold of the same key that is still kept.
			if hs, ok := stale[h.key]; ok && !slices.Contains(hs, h) {
				delete(stale, h.key)
			}
		}
		for key, hs := range stale {
			for _, h := range hs {
				delete(t.m, h)
				h.mu.Lock()
				if h.freed { // released meanwhile
					delete(stale, key)
				}
				h.swept = true
				h.mu.Unlock()
			}
		}
	}
	t.mu.Unlock()
	for key := range stale {
		b.deleteLater(key)
	}
}

// leases is the backend's shared leases, by the TTL asked for.
type leases struct {
	mu       sync.Mutex
	byNeed   map[int64]*sharedLease
	granting map[int64]chan struct{} // a grant in flight, closed when it ends
}

// shared returns the backend's lease for TTL need (seconds), granting one
// if it has none; concurrent callers share one grant.
func (b *Backend) shared(ctx context.Context, need int64) (sharedLease, error) {
	ls := &b.leases
	for {
		ls.mu.Lock()
		if l := ls.byNeed[need]; l != nil {
			ls.mu.Unlock()
			return *l, nil
		}
		if ch := ls.granting[need]; ch != nil {
			ls.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return sharedLease{}, ctx.Err()
			}
		}
		ch := make(chan struct{})
		if ls.granting == nil {
			ls.granting = make(map[int64]chan struct{})
			ls.byNeed = make(map[int64]*sharedLease)
		}
		ls.granting[need] = ch
		ls.mu.Unlock()

		sent := time.Now()
		lr, err := b.cli.Grant(ctx, need)
		ls.mu.Lock()
		delete(ls.granting, need)
		close(ch)
		var l sharedLease
		if err == nil {
			l = sharedLease{id: lr.ID, ttl: lr.TTL, alive: sent}
			ls.byNeed[need] = &l
		}
		ls.mu.Unlock()
		return l, err
	}
}

// noteKeepAlive records the answers to keep-alives sent at sent: a shared
// lease that etcd renewed is alive from then; one it does not know is
// dropped, so that the next acquisition grants another.
func (b *Backend) noteKeepAlive(ttls map[clientv3.LeaseID]int64, sent time.Time) {
	ls := &b.leases
	ls.mu.Lock()
	shared := make(map[clientv3.LeaseID]bool, len(ls.byNeed))
	for need, l := range ls.byNeed {
		shared[l.id] = true
		ttl, ok := ttls[l.id]
		switch {
		case !ok:
		case ttl <= 0:
			delete(ls.byNeed, need)
		case sent.After(l.alive):
			l.alive = sent
		}
	}
	ls.mu.Unlock()
	b.sweep(shared)
}

// dropShared forgets the shared lease id, which etcd no longer knows.
func (b *Backend) dropShared(id clientv3.LeaseID) {
	b.noteKeepAlive(map[clientv3.LeaseID]int64{id: 0}, time.Time{})
}

// freshShared returns the shared lease id if it is fresh.
func (b *Backend) freshShared(id clientv3.LeaseID) (sharedLease, bool) {
	ls := &b.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.byNeed {
		if l.id == id && l.fresh(time.Now()) {
			return *l, true
		}
	}
	return sharedLease{}, false
}

// isShared reports whether id is one of the backend's shared leases.
func (b *Backend) isShared(id clientv3.LeaseID) bool {
	ls := &b.leases
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.byNeed {
		if l.id == id {
			return true
		}
	}
	return false
}

// closeLeases revokes the shared leases that hold no keys (Close does not
// release held locks: their keys expire with their lease).
func (b *Backend) closeLeases() {
	ls := &b.leases
	ls.mu.Lock()
	var ids []clientv3.LeaseID
	for _, l := range ls.byNeed {
		ids = append(ids, l.id)
	}
	ls.byNeed = nil
	ls.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		r, err := b.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
		if err == nil && len(r.Keys) == 0 {
			_, _ = b.cli.Revoke(ctx, id)
		}
		cancel()
	}
}

// revokeTimeout bounds a background lease revocation or key deletion.
const revokeTimeout = 3 * time.Second

// revokeLater revokes lease id in the background: a lease a key was moved
// onto (for a longer TTL) once the key is released. Revoking deletes the
// keys still attached to it; nothing depends on its success, since an
// unrevoked lease expires with its TTL. When many requests are in flight
// in the background it revokes in the caller's goroutine instead.
func (b *Backend) revokeLater(id clientv3.LeaseID) {
	if id == clientv3.NoLease || b.isShared(id) {
		return
	}
	b.later(func(ctx context.Context) { _, _ = b.cli.Revoke(ctx, id) })
}

// deleteLater deletes key in the background: the key of an acquisition
// that failed after it may have been put. Keys are unique to their
// acquisition, so this touches no other. A key on a shared lease would
// live as long as the backend's other holds keep that lease alive, so the
// deletion is tried again until it succeeds or the backend closes (then
// nothing keeps the lease alive any more).
func (b *Backend) deleteLater(key string) {
	b.later(func(ctx context.Context) {
		_, err := b.cli.Delete(ctx, key)
		for n := 1; err != nil; n++ {
			select {
			case <-b.quit:
				return
			case <-time.After(backoff(n)):
			}
			actx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
			_, err = b.cli.Delete(actx, key)
			cancel()
		}
	})
}

// later runs f in the background (or, when many are in flight, in the
// caller's goroutine), bounded by revokeTimeout; Close waits for it.
func (b *Backend) later(f func(ctx context.Context)) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.bg.Add(1)
	b.mu.Unlock()
	run := func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		f(ctx)
	}
	select {
	case b.bgSem <- struct{}{}:
		go func() {
			defer func() { <-b.bgSem }()
			run()
		}()
	default:
		run()
	}
}
