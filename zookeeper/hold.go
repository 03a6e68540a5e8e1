package zookeeper

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// holdOf returns the backend's state of h: its Handle, or, for a Hold made
// elsewhere (another process releasing a stale lease), the holder's node
// if it carries h's token and owner.
func (b *Backend) holdOf(ctx context.Context, h dlock.Hold) (*hold, error) {
	if hd, ok := h.Handle.(*hold); ok && hd != nil {
		return hd, nil
	}
	if h.Kind != dlock.KindMutex {
		return b.weightedHoldOf(ctx, h)
	}
	parent := b.lockPath(h.Name)
	kids, err := b.children(ctx, parent)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, lostErr("lock %q is not held", h.Name)
	}
	if err != nil {
		return nil, b.unavailable("list "+parent, err)
	}
	q := queue(kids)
	if len(q) == 0 {
		return nil, lostErr("lock %q is not held", h.Name)
	}
	path := parent + "/" + q[0].name
	r, err := b.get(ctx, path, false)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, lostErr("token %d no longer holds %q", h.Token, h.Name)
	}
	if err != nil {
		return nil, b.unavailable("read "+path, err)
	}
	d := decodeData(r.data)
	if uint64(r.stat.Czxid) != h.Token || d.Owner != h.Owner {
		return nil, lostErr("%q is held by %q with token %d", h.Name, d.Owner, r.stat.Czxid)
	}
	sid, _ := b.session()
	return &hold{path: path, owner: h.Owner, token: r.stat.Czxid, session: ownSession(sid, r.stat.EphemeralOwner)}, nil
}

// overLocked returns why hd can be neither renewed nor released: it was
// released (as released says), or it is lost. b.mu is held.
func (hd *hold) overLocked(released string) error {
	if hd.done {
		return lostErr("token %d of %q was %s", hd.token, hd.name(), released)
	}
	return hd.lostErr()
}

// Renew checks that h still holds its lock: its node exists with h's token
// and, when it is in this backend's session, belongs to the current
// session. The answer proves that the session was alive when the request
// was sent, so the session cannot expire, nor the node go, before the send
// time plus the session timeout; ttl (at most the session timeout) is how
// long the backend keeps the hold without a further renewal.
func (b *Backend) Renew(ctx context.Context, h dlock.Hold, ttl time.Duration) error {
	hd, err := b.holdOf(ctx, h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	err = hd.overLocked("released")
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if err := b.checkTTL(ttl); err != nil {
		return err
	}
	b.mu.Lock()
	hd.busy++
	b.mu.Unlock()

	start := time.Now()
	v := b.verifyStart()
	st, err := b.exists(ctx, hd.path)
	v = b.verifyEnd(v)
	sid, _ := b.session()

	b.mu.Lock()
	defer b.mu.Unlock()
	hd.busy--
	switch {
	case errors.Is(err, zk.ErrNoNode) || err == nil && hd.gone:
		hd.lose(lostErr("the node of token %d of %q was deleted (session ended or lock released)", hd.token, hd.name()))
		hd.done = true
	case err != nil:
		return b.unavailable("renew "+hd.path, err)
	case st.Czxid != hd.token:
		hd.lose(lostErr("the node of %q has token %d, not %d", hd.name(), st.Czxid, hd.token))
		hd.done = true
	case hd.own() && (st.EphemeralOwner != hd.session || sid != hd.session):
		hd.lose(lostErr("the node of token %d of %q belongs to session 0x%x, not to the current session 0x%x", hd.token, hd.name(), st.EphemeralOwner, sid))
	}
	if hd.lost != nil {
		b.kick()
		return hd.lostErr()
	}
	hd.expires = b.instant(start.Add(ttl))
	if v.gen != 0 && hd.own() && b.byPath[hd.path] == hd {
		// The node was there after the recursive watch was set, and
		// its deletion since would have marked hd gone.
		hd.gen = v.gen
	}
	return nil
}

// RenewBatch renews many holds with one request for all those that the
// recursive watch guards, and a request each for the others.
//
// A backend that holds many leases (armHolds) sets a persistent recursive
// watch on its root (ZooKeeper 3.6's addWatch, see wire.arm) on each
// connection: ZooKeeper then reports every deletion under the root, and
// nodeDeleted marks the hold of the deleted node (and reports it lost at
// once). A hold is guarded from the moment its node was seen (made, or
// read by a renewal) after the watch was set on the current connection.
// A renewal of a guarded hold that is not marked needs no request of its
// own: the one request of the batch (a read of the root), once answered
// on the same connection, proves that the session was alive when it was
// sent, and ZooKeeper delivers a watch's notification before the answer
// to any request sent after the change, so a node deleted before then has
// marked its hold by the time the answer arrives. The node's path carries
// a random id per acquisition, so the node that exists at it is the
// hold's own. A hold that is not guarded (on a new connection, in another
// session, a second hold of the same node, or with a Backend made by New,
// whose connection the wire does not see) is renewed by its own request,
// pipelined by a fixed number of goroutines (not one per hold).
//
// The watch costs the client nothing per hold, where a watch per node
// cost about 260 bytes in go-zookeeper (BenchmarkWatchBytes).
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	b.mu.Lock()
	want := b.wantWatchLocked()
	b.mu.Unlock()
	if want {
		// Set it before the renewals below, so that they leave their
		// holds guarded (after a reconnection, say).
		b.wire.arm(ctx)
	}
	quiet := make([]*hold, len(rs)) // the holds the recursive watch guards
	n := 0
	b.mu.Lock()
	for i, r := range rs {
		if hd, ok := r.Hold.Handle.(*hold); ok && hd != nil && hd.gen != 0 && hd.busy == 0 {
			quiet[i] = hd
			hd.busy++
			n++
		}
	}
	b.mu.Unlock()
	if n > 0 {
		start := time.Now()
		g := b.wire.sentGen()
		_, err := b.exists(ctx, "/")
		if b.wire.watchGen() != g {
			g = 0
		}
		sid, _ := b.session()
		b.mu.Lock()
		for i, hd := range quiet {
			if hd != nil {
				hd.busy--
				if errs[i] = b.renewQuietLocked(hd, rs[i].TTL, start, sid, g, err); errs[i] == errUnguarded {
					quiet[i] = nil
					n--
				}
			}
		}
		b.mu.Unlock()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(rs)-n, renewWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(rs); i = int(next.Add(1) - 1) {
				if quiet[i] == nil {
					errs[i] = b.Renew(ctx, rs[i].Hold, rs[i].TTL)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// errUnguarded says that the recursive watch no longer vouches for a
// hold: it needs a request of its own to be renewed.
var errUnguarded = errors.New("the hold is not guarded by the recursive watch")

// renewQuietLocked renews hd, guarded by the recursive watch when the
// batch's request was sent at start and answered with err in session sid
// on connection generation g (0: the watch was not set, or the connection
// changed; see RenewBatch). b.mu is held.
func (b *Backend) renewQuietLocked(hd *hold, ttl time.Duration, start time.Time, sid int64, g uint32, err error) error {
	if lost := hd.overLocked("released"); lost != nil {
		return lost
	}
	if err := b.checkTTLLocked(ttl); err != nil {
		return err
	}
	if hd.gone || g == 0 || hd.gen != g {
		hd.gen = 0
		return errUnguarded
	}
	switch {
	case err != nil:
		return b.unavailable("renew "+hd.path, err)
	case hd.session != sid:
		err := hd.lose(lostErr("the node of token %d of %q belongs to session 0x%x, not to the current session 0x%x", hd.token, hd.name(), hd.session, sid))
		b.kick()
		return err
	}
	hd.expires = b.instant(start.Add(ttl))
	return nil
}

// renewWorkers is how many renewals of a batch are in flight at once.
const renewWorkers = 64

// Release gives up one hold of h: it deletes h's node when h is its only
// hold (one conditional delete for a plain, non-reentrant hold), and
// otherwise lowers the count in the node's data.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	hd, err := b.holdOf(ctx, h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if err := hd.overLocked("already released"); err != nil {
		if !hd.done {
			b.kick() // the monitor deletes the node if it is still there
		}
		b.mu.Unlock()
		return err
	}
	hd.busy++
	b.mu.Unlock()
	err = b.releaseNode(ctx, hd)
	b.mu.Lock()
	hd.busy--
	if err == nil || errors.Is(err, dlock.ErrLeaseLost) {
		// Forget it here: a pass of the monitor per release made
		// releasing n holds cost n passes over n holds.
		hd.done = true
		b.forgetLocked(hd)
	} else {
		b.kick()
	}
	b.mu.Unlock()
	return err
}

// releaseNode takes one hold off h's node.
func (b *Backend) releaseNode(ctx context.Context, h *hold) error {
	if h.fresh {
		// Data version 0 means nobody re-entered: the count is 1.
		err := b.del(ctx, h.path, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			return lostErr("the node of token %d of %q is gone", h.token, h.name())
		case !errors.Is(err, zk.ErrBadVersion):
			return b.unavailable("release "+h.path, err)
		}
	}
	for range 16 {
		r, err := b.get(ctx, h.path, false)
		if errors.Is(err, zk.ErrNoNode) {
			return lostErr("the node of token %d of %q is gone", h.token, h.name())
		}
		if err != nil {
			return b.unavailable("release "+h.path, err)
		}
		d := decodeData(r.data)
		if r.stat.Czxid != h.token || d.Owner != h.owner {
			return lostErr("the node of %q is not token %d's", h.name(), h.token)
		}
		if d.Count <= 1 {
			err = b.del(ctx, h.path, r.stat.Version)
		} else {
			d.Count--
			_, err = b.set(ctx, h.path, d.encode(), r.stat.Version)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			continue
		case errors.Is(err, zk.ErrNoNode):
			return lostErr("the node of token %d of %q is gone", h.token, h.name())
		default:
			return b.unavailable("release "+h.path, err)
		}
	}
	return b.unavailable("release "+h.path, errors.New("the node kept changing"))
}
