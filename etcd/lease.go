package etcd

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle is the backend's state of a hold (dlock.Grant.Handle) or of a
// waiter: the key of the acquisition and the lease it is attached to now.
// Reentrant holds of one key share nothing but the key; each has its own
// handle.
type handle struct {
	name string
	key  string
	own  clientv3.LeaseID // the lease the acquisition brought; 0 if none (re-entered, or found by token)
	need int64            // the TTL asked for, whole seconds
	ttl  int64            // the TTL etcd granted own, seconds

	mu    sync.Mutex
	lease clientv3.LeaseID // the lease the key is on
	alive time.Time        // send time of the last grant or keep-alive of lease that etcd answered
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

// spare returns the hold's own lease for reuse, once its key is deleted,
// if the key was still on it.
func (h *handle) spare(deleted clientv3.LeaseID) (spareLease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own == 0 || deleted != h.own || h.lease != h.own {
		return spareLease{}, false
	}
	return spareLease{id: h.own, ttl: h.ttl, alive: h.alive}, true
}

// spareLease is a lease without keys, kept by the backend for the next
// acquisition with the same TTL: a keep-alive of it, which etcd answers
// without a raft round (no disk write), is cheaper than a grant, and is
// sent together with the acquisition's transaction.
type spareLease struct {
	id    clientv3.LeaseID
	ttl   int64     // granted, seconds
	alive time.Time // when etcd last had it
}

// maxSpares bounds the spare leases a backend keeps.
const maxSpares = 64

// takeSpare returns a spare lease for TTL need (seconds) that should still
// be alive: one whose last keep-alive was less than half its TTL ago.
// Older ones are revoked.
func (b *Backend) takeSpare(need int64) (spareLease, bool) {
	b.mu.Lock()
	var stale []clientv3.LeaseID
	var got spareLease
	found := false
	for ps := b.spares[need]; len(ps) > 0; {
		p := ps[len(ps)-1]
		ps = ps[:len(ps)-1]
		b.spares[need] = ps
		b.nspares--
		if time.Since(p.alive) < time.Duration(p.ttl)*time.Second/2 {
			got, found = p, true
			break
		}
		stale = append(stale, p.id)
	}
	b.mu.Unlock()
	for _, id := range stale {
		b.revokeLater(id)
	}
	return got, found
}

// putSpare keeps a lease without keys for reuse, or revokes it.
func (b *Backend) putSpare(need int64, p spareLease) {
	b.mu.Lock()
	if b.closed || b.nspares >= maxSpares {
		b.mu.Unlock()
		b.revokeLater(p.id)
		return
	}
	if b.spares == nil {
		b.spares = make(map[int64][]spareLease)
	}
	b.spares[need] = append(b.spares[need], p)
	b.nspares++
	b.mu.Unlock()
}

// revokeTimeout bounds a background lease revocation.
const revokeTimeout = 3 * time.Second

// revokeLater revokes lease id in the background: the lease of a released
// hold that cannot be reused, of a withdrawn waiter or of a failed attempt.
// Revoking deletes the keys still attached to it; nothing depends on its
// success, since an unrevoked lease expires with its TTL. When many
// revocations are in flight it revokes in the caller's goroutine instead.
func (b *Backend) revokeLater(id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.bg.Add(1)
	b.mu.Unlock()
	b.revoke(id)
}

// revoke revokes id; the caller has done b.bg.Add(1).
func (b *Backend) revoke(id clientv3.LeaseID) {
	run := func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		_, _ = b.cli.Revoke(ctx, id)
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
