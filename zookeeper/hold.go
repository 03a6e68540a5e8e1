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
	return b.renew(ctx, h, ttl, false)
}

// renew is Renew; with watch it leaves a watch on the node of an own hold
// of the current session, which lets later renewals in a batch go without
// a request of their own (see RenewBatch).
func (b *Backend) renew(ctx context.Context, h dlock.Hold, ttl time.Duration, watch bool) error {
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
	sid, _ := b.session()
	b.mu.Lock()
	hd.busy++
	// A watch left earlier stays: a second one on the node would be kept
	// by go-zookeeper until the node changes.
	watch = watch && hd.watch == nil && hd.own() && hd.session == sid
	b.mu.Unlock()

	start := time.Now()
	var st *zk.Stat
	var ch <-chan zk.Event
	if watch {
		st, ch, err = b.existsW(ctx, hd.path)
	} else {
		st, err = b.exists(ctx, hd.path)
	}
	sid, _ = b.session()

	b.mu.Lock()
	defer b.mu.Unlock()
	hd.busy--
	switch {
	case errors.Is(err, zk.ErrNoNode):
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
	if ch != nil {
		hd.watch = ch
	}
	return nil
}

// RenewBatch renews many holds with one request for all those that a
// watch already guards, and a request each for the others.
//
// A hold's first renewal in a batch reads its node as Renew does and
// leaves a watch on it. A later renewal of a hold whose watch is still
// quiet needs no request of its own: the one request of the batch (a read
// of the root), once answered, proves that the session was alive when it
// was sent, and ZooKeeper delivers a watch's event before the answer to
// any request sent after the change, so a node deleted (or changed) before
// then has its event in the watch's channel by the time the answer
// arrives. The node's path carries a random id per acquisition, so the
// node that exists at it is the hold's own. A hold whose watch fired, one
// in another session and one without a watch is renewed by its own
// request, pipelined by a fixed number of goroutines (not one per hold).
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	quiet := make([]*hold, len(rs)) // the holds a quiet watch guards
	n := 0
	b.mu.Lock()
	for i, r := range rs {
		if hd, ok := r.Hold.Handle.(*hold); ok && hd != nil && hd.watch != nil && hd.busy == 0 {
			quiet[i] = hd
			hd.busy++
			n++
		}
	}
	b.mu.Unlock()
	if n > 0 {
		start := time.Now()
		_, err := b.exists(ctx, "/")
		sid, _ := b.session()
		b.mu.Lock()
		for i, hd := range quiet {
			if hd != nil {
				hd.busy--
				if errs[i] = b.renewQuietLocked(hd, rs[i].TTL, start, sid, err); errs[i] == errWatchFired {
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
					errs[i] = b.renew(ctx, rs[i].Hold, rs[i].TTL, true)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// errWatchFired says that a hold's watch has an event: the hold needs a
// request of its own to be renewed.
var errWatchFired = errors.New("the node's watch fired")

// renewQuietLocked renews hd, whose watch was quiet when the batch's
// request was sent at start and answered with err in session sid (see
// RenewBatch). b.mu is held.
func (b *Backend) renewQuietLocked(hd *hold, ttl time.Duration, start time.Time, sid int64, err error) error {
	if lost := hd.overLocked("released"); lost != nil {
		return lost
	}
	if err := b.checkTTLLocked(ttl); err != nil {
		return err
	}
	select {
	case <-hd.watch:
		hd.watch = nil
		return errWatchFired
	default:
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
