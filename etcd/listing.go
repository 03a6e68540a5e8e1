package etcd

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// listings keeps, for each shared lease, the latest listing of the keys
// etcd has attached to it. A renewal of many holds on a shared lease
// learns from one listing that their keys are still there, instead of
// reading each. The Client renews in calls of about a thousand holds, so
// a listing per call made a renewal period cost a listing of every hold
// per thousand of them (at 100,000 holds: 100 listings of 100,000 keys
// every period, and renewals that came too late). The calls of a period
// now share one, within the bounds of usable.
type listings struct {
	mu      sync.Mutex
	seed    maphash.Seed
	started atomic.Uint64 // listings requested so far; numbers them
	byLease map[clientv3.LeaseID]*listing
}

// listing is the keys etcd had attached to one shared lease at some time
// after its request was sent, as sorted hashes (a key's string would cost
// more than the rest of its hold's state).
type listing struct {
	id     clientv3.LeaseID
	seq    uint64    // its number among the backend's listings
	sent   time.Time // when its request was sent
	done   chan struct{}
	hashes []uint64 // when done, if err is nil
	err    error
}

// epoch returns a number below the seq of every listing requested from now
// on: a hold whose key a request sent after this call found there needs
// such a listing to be told again that it is there.
func (ls *listings) epoch() uint64 { return ls.started.Load() }

// has reports whether key was attached to the listing's lease.
func (l *listing) has(seed maphash.Seed, key string) bool {
	_, ok := slices.BinarySearch(l.hashes, maphash.String(seed, key))
	return ok
}

// usable reports whether the listing may tell holds that were last found
// present by listing number after (or by a read sent before it was
// requested) that they still are: it was requested after that, and at most
// maxAge ago. So every renewal of a hold looks at its key anew, and a key
// deleted by someone else is found gone within maxAge and a renewal.
func (l *listing) usable(after uint64, maxAge time.Duration) bool {
	return l.seq > after && time.Since(l.sent) <= maxAge
}

// listing returns a usable listing (see listing.usable) of the keys attached
// to shared lease id: the latest one, or a new one. Callers that want one
// at the same time share the request.
func (b *Backend) listing(ctx context.Context, id clientv3.LeaseID, after uint64, maxAge time.Duration) (*listing, error) {
	ls := &b.listed
	for tries := 0; ; tries++ {
		ls.mu.Lock()
		l := ls.byLease[id]
		if l == nil || !l.usable(after, maxAge) {
			l = ls.startLocked(id, b.isShared)
			ls.mu.Unlock()
			b.list(ctx, l)
			return l, l.err
		}
		ls.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// A request that ended with its sender's context is no answer for
		// the others: one of them asks again.
		if l.err == nil || ctx.Err() != nil || tries > 0 {
			return l, l.err
		}
	}
}

// startLocked records a new listing of lease id, about to be requested,
// and forgets those of leases that are no longer shared.
func (ls *listings) startLocked(id clientv3.LeaseID, shared func(clientv3.LeaseID) bool) *listing {
	if ls.byLease == nil {
		ls.byLease = make(map[clientv3.LeaseID]*listing)
	}
	for other := range ls.byLease {
		if other != id && !shared(other) {
			delete(ls.byLease, other)
		}
	}
	l := &listing{id: id, seq: ls.started.Add(1), sent: time.Now(), done: make(chan struct{})}
	ls.byLease[id] = l
	return l
}

// list requests the listing l and records its answer.
func (b *Backend) list(ctx context.Context, l *listing) {
	ls := &b.listed
	r, err := b.cli.TimeToLive(ctx, l.id, clientv3.WithAttachedKeys())
	if err == nil {
		l.hashes = make([]uint64, len(r.Keys))
		for i, k := range r.Keys {
			l.hashes[i] = maphash.Bytes(ls.seed, k)
		}
		slices.Sort(l.hashes)
	} else {
		l.err = err
		ls.mu.Lock()
		if ls.byLease[l.id] == l {
			delete(ls.byLease, l.id)
		}
		ls.mu.Unlock()
	}
	close(l.done)
}
