package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// lockPath returns the container node of a lock name.
func (b *Backend) lockPath(name string) string {
	return b.cfg.root + "/" + escape(name)
}

// checkTTL refuses a TTL longer than the session timeout: the servers may
// delete the lock node one session timeout after they last heard from the
// client, so no lease can be promised for longer.
func (b *Backend) checkTTL(ttl time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checkTTLLocked(ttl)
}

// checkTTLLocked is checkTTL with b.mu held.
func (b *Backend) checkTTLLocked(ttl time.Duration) error {
	timeout, closed := b.timeout, b.closed
	if closed {
		return dlock.ErrClosed
	}
	if ttl > timeout {
		return fmt.Errorf("%w: TTL %v exceeds the ZooKeeper session timeout %v (raise the backend's session timeout, within the servers' maxSessionTimeout, or lower the TTL)", dlock.ErrInvalidOption, ttl, timeout)
	}
	return nil
}

// Acquire makes one attempt to acquire req: it creates the request's node
// in the lock's queue and reads the queue. The request is granted when its
// node is first, or at once, with the holder's token, when the holder's
// node carries req.Owner (reentrancy). Otherwise the node is deleted again
// (TryLock), or kept with a watch on its immediate predecessor and returned
// as the Waiter (Lock). Uncontended, that is one request: the multi that
// creates the node answers with the container's stat, whose count of
// children says whether the node is the only one; otherwise a children
// read follows.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := b.checkTTL(req.TTL); err != nil {
		return dlock.Grant{}, nil, err
	}
	if req.Kind != dlock.KindMutex {
		return b.acquireWeighted(ctx, req)
	}
	start := time.Now()
	w := &waiter{b: b, req: req, parent: b.lockPath(req.Name)}
	g, err := w.decideBounded(ctx, start, true)
	switch {
	case err == nil:
		return g, nil, nil
	case req.Wait && errors.Is(err, dlock.ErrNotAcquired):
		return dlock.Grant{}, w, err
	}
	w.withdraw(ctx)
	return dlock.Grant{}, nil, err
}

// waiter is a request with a node in a lock's queue.
type waiter struct {
	b      *Backend
	req    dlock.Request
	parent string

	path    string // the node, "" when it has none
	name    string // the node's name in parent
	czxid   int64
	session int64
	ver     verified // how the node was made (see verified)

	alone   bool            // the node was the container's only child when made
	watch   <-chan zk.Event // the predecessor's watch, nil once it fired
	pred    predNode        // the node watch is on
	ahead   <-chan zk.Event // the watch on the node before the predecessor
	head    bool            // the predecessor is the queue's head (the holder)
	next    bool            // the head was deleted: the waiter's node is first
	ready   bool            // look again without waiting
	offline bool            // the last attempt failed for want of a connection
}

var _ dlock.Waiter = (*waiter)(nil)

// maxRequestTimeout caps the bound of one acquisition attempt; see
// Backend.requestTimeout.
const maxRequestTimeout = 10 * time.Second

// requestTimeout bounds one attempt of an acquisition (one Acquire, or one
// look of a waiter), whatever ctx allows: the session timeout, at most
// maxRequestTimeout. go-zookeeper's requests have no timeout of their own,
// and a server that hangs (paused, overloaded) keeps the connection open,
// so without it TryLock(context.Background()) waited as long as the
// server hung. A session that has not been answered for the session
// timeout is lost anyway; etcd's acquisitions give up after the same 10 s.
func (b *Backend) requestTimeout() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return min(b.timeout, maxRequestTimeout)
}

// decideBounded is decide within the backend's requestTimeout: when that
// runs out before ctx, the attempt fails with ErrBackendUnavailable (what
// it left behind is cleaned up as after a cancelled ctx).
func (w *waiter) decideBounded(ctx context.Context, start time.Time, first bool) (dlock.Grant, error) {
	bound := w.b.requestTimeout()
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	g, err := w.decide(actx, start, first)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		err = w.b.unavailable("acquire in "+w.parent, fmt.Errorf("no answer from ZooKeeper within %v (the request timeout)", bound))
	}
	return g, err
}

// decide reads the queue and grants the waiter's node when it is first,
// re-enters when the holder has the same owner, and otherwise returns a
// *dlock.HeldError, having set watches on the immediate predecessor and the
// node before it if the request waits (see watchAhead). first says whether
// this is the request's first look, which always reads the holder's node
// (for the owner: reentrancy and the HeldError); later looks read it only
// when it is the predecessor and its watch did not read it already.
func (w *waiter) decide(ctx context.Context, start time.Time, first bool) (dlock.Grant, error) {
	for range 16 {
		if w.path == "" {
			if err := w.create(ctx); err != nil {
				return dlock.Grant{}, err
			}
			if w.alone {
				// Nobody holds the lock nor waits for it: granted by
				// the create alone, as no later node can come first.
				return w.grant(start), nil
			}
		}
		q, idx, err := w.position(ctx)
		switch {
		case err != nil:
			return dlock.Grant{}, err
		case idx < 0:
			// The node is gone: its session ended, or it was deleted.
			// Queue again.
			w.path = ""
			continue
		case idx == 0:
			return w.grant(start), nil
		}
		if !first && idx == 1 && w.watch != nil && w.pred.held != nil && w.pred.name == q[0].name && w.pred.owner != w.req.Owner {
			// A later look, woken by the node before the predecessor:
			// the watched predecessor is now first, so it holds the
			// lock, and its owner (read with the watch) is not the
			// request's. Its deletion grants the waiter without a read.
			w.head = true
			return dlock.Grant{}, w.pred.held
		}
		if !first && idx > 1 {
			// A later look, woken for a reason other than the holder's
			// release: wait for the predecessor again without reading
			// the holder (the holder changes quickly under contention,
			// and the first look told who held the lock).
			return dlock.Grant{}, w.watchAhead(ctx, q, idx, fmt.Errorf("%w: %d request(s) ahead in the queue", dlock.ErrNotAcquired, idx))
		}
		holder, err := w.readHolder(ctx, q, idx)
		switch {
		case err != nil:
			return dlock.Grant{}, err
		case holder.path == "" && holder.partial:
			return dlock.Grant{}, w.watchAhead(ctx, q, idx, fmt.Errorf("%w: %d request(s) ahead in the queue", dlock.ErrNotAcquired, idx))
		case holder.path == "":
			continue // all ahead left: list again
		}
		d, bad := parseData(holder.data, holder.stat)
		if bad != "" {
			return dlock.Grant{}, w.b.foreign(holder.path, bad)
		}
		if d.Kind != dlock.KindMutex {
			return dlock.Grant{}, conflict(d, w.req) // a semaphore's, say
		}
		if d.Owner == w.req.Owner {
			g, err := w.reenter(ctx, holder.path, holder.stat, d, start)
			if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
				continue
			}
			return g, err
		}
		held := heldError(holder.path, d, holder.stat)
		switch {
		case !w.req.Wait:
			return dlock.Grant{}, held
		case holder.watched:
			// The holder is the first node ahead that exists, so its
			// deletion leaves the waiter's node first (see Wait).
			w.ready, w.watch, w.ahead, w.head = false, holder.watch, nil, true
			w.pred = predNode{name: q[idx-1].name, owner: d.Owner, held: held}
			return dlock.Grant{}, held
		}
		return dlock.Grant{}, w.watchAhead(ctx, q, idx, held)
	}
	return dlock.Grant{}, w.b.unavailable("acquire "+w.parent, errors.New("the queue kept changing"))
}

// position lists the lock's queue and finds the waiter's node in it: its
// index, or -1 when the node is gone.
func (w *waiter) position(ctx context.Context) ([]child, int, error) {
	kids, err := w.b.children(ctx, w.parent)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, -1, w.b.unavailable("list "+w.parent, err)
	}
	q := queue(kids)
	return q, slices.IndexFunc(q, func(c child) bool { return c.name == w.name }), nil
}

// holderNode is the node of the lock's holder as read by readHolder.
type holderNode struct {
	path string // "" when not found
	getResult
	watched bool // the read set a watch: the holder is the predecessor
	partial bool // not found, but only the first node ahead was read
}

// readHolder reads the holder: the first of the nodes ahead of q[idx] that
// still exists (under contention it may have gone since the listing, and
// then the next one is looked at without listing again), with a watch when
// it is the waiting request's predecessor. A waiting request with more
// than one node ahead reads only the first: the holder when the queue was
// read, the only one that can be waiting for this request (a reentrant
// Lock under its lease). If it has gone since, the request waits without
// a holder's name, and re-enters a later holder with its owner when that
// one is its predecessor (see decide).
func (w *waiter) readHolder(ctx context.Context, q []child, idx int) (holderNode, error) {
	ahead := q[:idx]
	if w.req.Wait && idx > 1 {
		ahead = q[:1]
	}
	for j, c := range ahead {
		path := w.parent + "/" + c.name
		watch := w.req.Wait && j == idx-1
		r, err := w.b.get(ctx, path, watch)
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			return holderNode{}, w.b.unavailable("read "+path, err)
		default:
			return holderNode{path: path, getResult: r, watched: watch}, nil
		}
	}
	return holderNode{partial: len(ahead) < idx}, nil
}

// predNode is the waiter's predecessor as its watch read it.
type predNode struct {
	name  string
	owner string // "" when the node holds data dlock did not write
	held  error  // the request's answer once the node holds the lock
}

// watchAhead sets a watch on the predecessor q[idx-1], unless the watch set
// earlier is still on it, and one on the node before it, q[idx-2]: in a
// queue whose waiters stay, that node's deletion means the predecessor was
// granted, and the waiter then looks again (see decide) while the
// predecessor holds the lock, rather than after its release, so that the
// release grants it without a read. When either node has gone already,
// the next Wait returns at once. It returns held, the request's answer for
// now.
func (w *waiter) watchAhead(ctx context.Context, q []child, idx int, held error) error {
	w.ready, w.ahead, w.head = false, nil, false
	if w.watch == nil || w.pred.name != q[idx-1].name {
		w.watch = nil
		pred := w.parent + "/" + q[idx-1].name
		p, err := w.b.get(ctx, pred, true)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			w.ready = true // the predecessor left already: look again
			return held
		case err != nil:
			return w.b.unavailable("watch "+pred, err)
		}
		w.watch = p.watch
		w.pred = predNode{name: q[idx-1].name}
		if d, bad := parseData(p.data, p.stat); bad == "" {
			w.pred.owner, w.pred.held = d.Owner, heldError(pred, d, p.stat)
		}
	}
	if idx < 2 {
		return held
	}
	before := w.parent + "/" + q[idx-2].name
	_, ch, err := w.b.existsW(ctx, before)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		w.ready = true
	case err != nil:
		return w.b.unavailable("watch "+before, err)
	default:
		w.ahead = ch
	}
	return held
}

// heldError names the holder of a lock: the owner in its node, or the node.
func heldError(node string, d nodeData, st *zk.Stat) error {
	owner := d.Owner
	if owner == "" {
		owner = "(node " + node[strings.LastIndexByte(node, '/')+1:] + ")"
	}
	return &dlock.HeldError{Holder: dlock.Holder{Owner: owner, Token: uint64(st.Czxid)}}
}

// foreign is the error of an acquisition whose queue is headed by node,
// a node dlock did not write (see parseData). The caller withdraws its own
// node, so that nothing is left changed.
func (b *Backend) foreign(node, why string) error {
	return fmt.Errorf("%w: node %s holds data that dlock did not write: %s; nothing was changed", dlock.ErrForeignData, node, why)
}

// grant makes the waiter's node the hold.
func (w *waiter) grant(start time.Time) dlock.Grant {
	h := &hold{path: w.path, owner: w.req.Owner, token: w.czxid, session: w.session, fresh: true}
	w.b.addHold(h, start.Add(w.req.TTL), w.ver)
	w.path = ""
	return dlock.Grant{Token: uint64(w.czxid), Count: 1, Handle: h}
}

// reenter adds one to the count of the holder's node, whose owner is the
// waiter's, and withdraws the waiter's own node.
func (w *waiter) reenter(ctx context.Context, holder string, st *zk.Stat, d nodeData, start time.Time) (dlock.Grant, error) {
	b := w.b
	if _, err := b.set(ctx, holder, encodeData(d.Owner, d.Count+1), st.Version); err != nil {
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			return dlock.Grant{}, err
		}
		return dlock.Grant{}, b.unavailable("re-enter "+holder, err)
	}
	w.withdraw(ctx)
	sid, _ := b.session()
	h := &hold{path: holder, owner: w.req.Owner, token: st.Czxid, session: ownSession(sid, st.EphemeralOwner)}
	b.addHold(h, start.Add(w.req.TTL), verified{})
	return dlock.Grant{Token: uint64(st.Czxid), Count: d.Count + 1, Handle: h}, nil
}

// addHold registers h, granted with an expiry and, if v says so, guarded
// by the recursive watch since its node was made (see verified).
func (b *Backend) addHold(h *hold, expires time.Time, v verified) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h.expires = b.instant(expires)
	b.holds = append(b.holds, h)
	h.slot = int32(len(b.holds))
	if _, dup := b.byPath[h.path]; !dup {
		// A second hold on a node (a reentry) is renewed by requests.
		b.byPath[h.path] = h
		if v.gen != 0 && !b.deletedSinceLocked(h.path, v.seq) {
			h.gen = v.gen
		}
	}
	b.armSoonLocked()
	if expires.Before(b.sweepAt) {
		b.kick() // the monitor would sleep past the hold's expiry
	}
}

// forgetLocked takes h out of b.holds, if it is there: the last hold
// moves into its place. b.mu is held.
func (b *Backend) forgetLocked(h *hold) {
	if h.slot == 0 {
		return
	}
	if b.byPath[h.path] == h {
		delete(b.byPath, h.path)
	}
	i, last := int(h.slot-1), len(b.holds)-1
	b.holds[i] = b.holds[last]
	b.holds[i].slot = int32(i + 1)
	b.holds[last] = nil
	b.holds = b.holds[:last]
	h.slot = 0
}

// withdraw deletes the waiter's node, or leaves it to the monitor when that
// fails.
func (w *waiter) withdraw(ctx context.Context) error {
	if w.path == "" {
		return nil
	}
	b := w.b
	path, session := w.path, w.session
	w.path = ""
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := b.del(ctx, path, -1)
	if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, dlock.ErrClosed) {
		return nil
	}
	b.addOrphan(orphan{parent: w.parent, path: path, session: session})
	return b.unavailable("delete "+path, err)
}

// Wait blocks until the predecessor's node is deleted (or changed), the
// session's state changes, or ctx is done.
func (w *waiter) Wait(ctx context.Context) error {
	b := w.b
	if w.offline {
		w.offline = false
		return b.waitConnected(ctx)
	}
	if w.ready || w.watch == nil {
		w.ready = false
		return ctx.Err()
	}
	select {
	case ev := <-w.watch:
		// Nodes are never queued ahead of an existing one, so when the
		// head that the waiter watched is deleted, the waiter is first.
		w.next = w.head && ev.Type == zk.EventNodeDeleted
		w.watch = nil
	case <-w.ahead:
		w.ahead = nil
	case <-b.sessionChanged():
	case <-ctx.Done():
		return ctx.Err()
	case <-b.quit:
		return dlock.ErrClosed
	}
	return nil
}

// Acquire looks at the queue again. A failure of the connection does not
// end the wait: it is reported as not acquired, and the next Wait waits for
// the session to be connected again (the node lives as long as the
// session; if the session ends, the waiter queues again).
func (w *waiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	start := time.Now()
	if w.next {
		// Woken by the deletion of the head: granted without reading
		// the queue, if the node's session is still the connected one.
		w.next = false
		if sid, ok := w.b.session(); ok && sid == w.session && w.path != "" {
			return w.grant(start), nil
		}
	}
	g, err := w.decideBounded(ctx, start, false)
	if err != nil && errors.Is(err, dlock.ErrBackendUnavailable) && ctx.Err() == nil {
		w.offline = true
		return dlock.Grant{}, fmt.Errorf("%w: waiting for ZooKeeper: %w", dlock.ErrNotAcquired, err)
	}
	return g, err
}

// Cancel deletes the waiter's node, so that the next in the queue watches
// the one before it instead.
func (w *waiter) Cancel(ctx context.Context) error {
	return w.withdraw(ctx)
}
