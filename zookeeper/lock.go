package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	timeout, closed := b.timeout, b.closed
	b.mu.Unlock()
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
// as the Waiter (Lock). Uncontended, that is two requests: a multi that
// creates the node, and one children read.
func (b *Backend) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	if err := b.checkTTL(req.TTL); err != nil {
		return dlock.Grant{}, nil, err
	}
	start := time.Now()
	w := &waiter{b: b, req: req, parent: b.lockPath(req.Name)}
	if err := w.create(ctx); err != nil {
		return dlock.Grant{}, nil, err
	}
	g, err := w.decide(ctx, start, true)
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

	watch   <-chan zk.Event // the predecessor's watch
	ready   bool            // look again without waiting
	offline bool            // the last attempt failed for want of a connection
}

var _ dlock.Waiter = (*waiter)(nil)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// create makes the waiter's node: an ephemeral sequential child of the
// lock's container, created in one multi with a setData on the container so
// that the answer carries the transaction's zxid (the container's mzxid is
// the new node's czxid: the token), and named like Curator's protected
// nodes, so that when the connection is lost before the answer comes, the
// node is found again by its random id instead of being left behind or
// made twice. A missing container (and root) is created on the way.
func (w *waiter) create(ctx context.Context) error {
	b := w.b
	guid := randHex(guidLen / 2)
	prefix := w.parent + "/" + protectedPrefix + guid + lockMarker
	data := encodeData(w.req.Owner, 1)
	var last error
	for range 8 {
		res, err := callLate(b, ctx, func() ([]zk.MultiResponse, error) {
			return b.conn.Multi(
				&zk.CreateRequest{Path: prefix, Data: data, Acl: b.cfg.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: w.parent, Data: nil, Version: -1})
		}, func(res []zk.MultiResponse, err error) {
			// The caller gave up while the create was in flight.
			sid, _ := b.session()
			if err == nil && len(res) > 0 {
				b.addOrphan(orphan{parent: w.parent, path: res[0].String, session: sid})
			} else if !answered(err) {
				b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			}
		})
		switch {
		case err == nil && len(res) == 2 && res[1].Stat != nil:
			// The setData's stat is the container's: its mzxid is the
			// multi's zxid, which is the new node's czxid.
			sid, _ := b.session()
			w.setNode(res[0].String, res[1].Stat.Mzxid, sid)
			return nil
		case err == nil:
			return fmt.Errorf("zookeeper: unexpected multi answer %+v", res)
		case errors.Is(err, zk.ErrNoNode):
			if err := b.ensureParent(ctx, w.parent); err != nil {
				return err
			}
			last = err
			continue
		case answered(err):
			return fmt.Errorf("zookeeper: create in %s: %w", w.parent, err)
		case errors.Is(err, dlock.ErrClosed):
			return err
		}
		// The connection failed: the node may have been made.
		last = err
		sid, _ := b.session()
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return err // the late answer is handled above
			}
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return ctx.Err()
		}
		if errors.Is(err, zk.ErrSessionExpired) {
			continue // a node of the expired session is gone with it
		}
		if werr := b.waitConnected(ctx); werr != nil {
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return werr
		}
		found, ferr := w.find(ctx, guid)
		if ferr != nil {
			b.addOrphan(orphan{parent: w.parent, guid: guid, session: sid})
			return b.unavailable("look for the node after a connection loss in "+w.parent, ferr)
		}
		if found {
			return nil
		}
	}
	return b.unavailable("create in "+w.parent, last)
}

func (w *waiter) setNode(path string, czxid, session int64) {
	w.path, w.czxid, w.session = path, czxid, session
	w.name = path[strings.LastIndexByte(path, '/')+1:]
}

// find looks for the node with the random id guid after a connection loss.
// A sync first brings the server up to date with the leader: a create sent
// on the lost connection was either ordered before it (and is seen), or
// reached the leader after the session moved and was refused.
func (w *waiter) find(ctx context.Context, guid string) (bool, error) {
	b := w.b
	if _, err := call(b, ctx, func() (string, error) { return b.conn.Sync(w.parent) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, err
	}
	kids, err := b.children(ctx, w.parent)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, k := range kids {
		if childGUID(k) != guid {
			continue
		}
		path := w.parent + "/" + k
		st, err := b.exists(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		w.setNode(path, st.Czxid, st.EphemeralOwner)
		return true, nil
	}
	return false, nil
}

// ensureParent creates the lock's container, and the root if need be.
func (b *Backend) ensureParent(ctx context.Context, parent string) error {
	mk := func(path string, container bool) error {
		_, err := call(b, ctx, func() (string, error) {
			if container {
				return b.conn.CreateContainer(path, nil, zk.FlagContainer, b.cfg.acl)
			}
			return b.conn.Create(path, nil, zk.FlagPersistent, b.cfg.acl)
		})
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mk(parent, true)
	if errors.Is(err, zk.ErrNoNode) {
		p := ""
		for _, part := range strings.Split(b.cfg.root[1:], "/") {
			p += "/" + part
			if err := mk(p, false); err != nil {
				return b.unavailable("create "+p, err)
			}
		}
		err = mk(parent, true)
	}
	if err != nil {
		return b.unavailable("create "+parent, err)
	}
	return nil
}

type child struct {
	name string
	seq  int64
}

// queue returns the lock children of parent in sequence order.
func queue(kids []string) []child {
	q := make([]child, 0, len(kids))
	for _, k := range kids {
		if s := childSeq(k); s >= 0 {
			q = append(q, child{k, s})
		}
	}
	slices.SortFunc(q, func(a, b child) int {
		if a.seq != b.seq {
			if a.seq < b.seq {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return q
}

// decide reads the queue and grants the waiter's node when it is first,
// re-enters when the holder has the same owner, and otherwise returns a
// *dlock.HeldError, having set a watch on the immediate predecessor if the
// request waits. first says whether this is the request's first look,
// which always reads the holder's node (for the owner: reentrancy and the
// HeldError); later looks read it only when it is the predecessor.
func (w *waiter) decide(ctx context.Context, start time.Time, first bool) (dlock.Grant, error) {
	b := w.b
	for range 16 {
		if w.path == "" {
			if err := w.create(ctx); err != nil {
				return dlock.Grant{}, err
			}
		}
		kids, err := b.children(ctx, w.parent)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return dlock.Grant{}, b.unavailable("list "+w.parent, err)
		}
		q := queue(kids)
		idx := slices.IndexFunc(q, func(c child) bool { return c.name == w.name })
		if idx < 0 {
			// The node is gone: its session ended, or it was deleted.
			// Queue again.
			w.path = ""
			continue
		}
		if idx == 0 {
			return w.grant(start), nil
		}
		holder := w.parent + "/" + q[0].name
		pred := w.parent + "/" + q[idx-1].name
		watchHolder := w.req.Wait && pred == holder
		if !first && !watchHolder {
			// A later look, woken for a reason other than the holder's
			// release: wait for the predecessor again without reading
			// the holder (the holder changes quickly under contention,
			// and the first look told who held the lock).
			w.ready, w.watch = false, nil
			p, err := b.get(ctx, pred, true)
			switch {
			case errors.Is(err, zk.ErrNoNode):
				w.ready = true
			case err != nil:
				return dlock.Grant{}, b.unavailable("watch "+pred, err)
			default:
				w.watch = p.watch
			}
			return dlock.Grant{}, fmt.Errorf("%w: %d request(s) ahead in the queue", dlock.ErrNotAcquired, idx)
		}
		// The holder is the first of those ahead that still exists:
		// under contention it may have gone since the listing, and then
		// the next one is looked at without listing again.
		var r getResult
		found := false
		for j := 0; j < idx && !found; j++ {
			holder = w.parent + "/" + q[j].name
			r, err = b.get(ctx, holder, w.req.Wait && j == idx-1)
			switch {
			case errors.Is(err, zk.ErrNoNode):
			case err != nil:
				return dlock.Grant{}, b.unavailable("read "+holder, err)
			default:
				found = true
				watchHolder = w.req.Wait && j == idx-1
			}
		}
		if !found {
			continue // all ahead left: list again
		}
		d, bad := parseData(r.data, r.stat)
		if bad != "" {
			return dlock.Grant{}, b.foreign(holder, bad)
		}
		if d.Owner == w.req.Owner {
			g, err := w.reenter(ctx, holder, r.stat, d, start)
			if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
				continue
			}
			return g, err
		}
		owner := d.Owner
		if owner == "" {
			owner = "(node " + holder[strings.LastIndexByte(holder, '/')+1:] + ")"
		}
		held := &dlock.HeldError{Holder: dlock.Holder{Owner: owner, Token: uint64(r.stat.Czxid)}}
		if !w.req.Wait {
			return dlock.Grant{}, held
		}
		w.ready, w.watch = false, nil
		if watchHolder {
			w.watch = r.watch
			return dlock.Grant{}, held
		}
		p, err := b.get(ctx, pred, true)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			w.ready = true // the predecessor left already: look again
		case err != nil:
			return dlock.Grant{}, b.unavailable("watch "+pred, err)
		default:
			w.watch = p.watch
		}
		return dlock.Grant{}, held
	}
	return dlock.Grant{}, b.unavailable("acquire "+w.parent, errors.New("the queue kept changing"))
}

// foreign is the error of an acquisition whose queue is headed by node,
// a node dlock did not write (see parseData). The caller withdraws its own
// node, so that nothing is left changed.
func (b *Backend) foreign(node, why string) error {
	return fmt.Errorf("%w: node %s holds data that dlock did not write: %s; nothing was changed", dlock.ErrForeignData, node, why)
}

// grant makes the waiter's node the hold.
func (w *waiter) grant(start time.Time) dlock.Grant {
	h := &hold{path: w.path, name: w.req.Name, owner: w.req.Owner, token: w.czxid, own: true, session: w.session, fresh: true}
	w.b.addHold(h, start.Add(w.req.TTL))
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
	h := &hold{path: holder, name: w.req.Name, owner: w.req.Owner, token: st.Czxid, own: sid != 0 && st.EphemeralOwner == sid, session: sid}
	b.addHold(h, start.Add(w.req.TTL))
	return dlock.Grant{Token: uint64(st.Czxid), Count: d.Count + 1, Handle: h}, nil
}

func (b *Backend) addHold(h *hold, expires time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h.expires = expires
	b.holds[h] = struct{}{}
	b.kick()
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
	case <-w.watch:
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
	g, err := w.decide(ctx, start, false)
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

// holdOf returns the backend's state of h: its Handle, or, for a Hold made
// elsewhere (another process releasing a stale lease), the holder's node
// if it carries h's token and owner.
func (b *Backend) holdOf(ctx context.Context, h dlock.Hold) (*hold, error) {
	if hd, ok := h.Handle.(*hold); ok && hd != nil {
		return hd, nil
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
	return &hold{path: path, name: h.Name, owner: h.Owner, token: r.stat.Czxid, own: sid != 0 && r.stat.EphemeralOwner == sid, session: sid}, nil
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
	switch {
	case hd.done:
		b.mu.Unlock()
		return lostErr("token %d of %q was released", hd.token, hd.name)
	case hd.lost != nil:
		err := hd.lost
		b.mu.Unlock()
		return err
	}
	b.mu.Unlock()
	if err := b.checkTTL(ttl); err != nil {
		return err
	}
	b.mu.Lock()
	hd.busy++
	b.mu.Unlock()

	start := time.Now()
	st, err := b.exists(ctx, hd.path)
	sid, _ := b.session()

	b.mu.Lock()
	defer b.mu.Unlock()
	hd.busy--
	switch {
	case errors.Is(err, zk.ErrNoNode):
		hd.lost = lostErr("the node of token %d of %q was deleted (session ended or lock released)", hd.token, hd.name)
		hd.done = true
	case err != nil:
		return b.unavailable("renew "+hd.path, err)
	case st.Czxid != hd.token:
		hd.lost = lostErr("the node of %q has token %d, not %d", hd.name, st.Czxid, hd.token)
		hd.done = true
	case hd.own && (st.EphemeralOwner != hd.session || sid != hd.session):
		hd.lost = lostErr("the node of token %d of %q belongs to session 0x%x, not to the current session 0x%x", hd.token, hd.name, st.EphemeralOwner, sid)
	}
	if hd.lost != nil {
		b.kick()
		return hd.lost
	}
	hd.expires = start.Add(ttl)
	return nil
}

// RenewBatch renews many holds at once: the requests go out together on
// the one connection, so a batch costs one round trip.
func (b *Backend) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	errs := make([]error, len(rs))
	done := make(chan struct{}, len(rs))
	for i, r := range rs {
		go func() {
			errs[i] = b.Renew(ctx, r.Hold, r.TTL)
			done <- struct{}{}
		}()
	}
	for range rs {
		<-done
	}
	return errs
}

// Release gives up one hold of h: it deletes h's node when h is its only
// hold (one conditional delete for a plain, non-reentrant hold), and
// otherwise lowers the count in the node's data.
func (b *Backend) Release(ctx context.Context, h dlock.Hold) error {
	hd, err := b.holdOf(ctx, h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	switch {
	case hd.done:
		b.mu.Unlock()
		return lostErr("token %d of %q was already released", hd.token, hd.name)
	case hd.lost != nil:
		// The monitor deletes the node if it is still there.
		err := hd.lost
		b.kick()
		b.mu.Unlock()
		return err
	}
	hd.busy++
	b.mu.Unlock()
	err = b.releaseNode(ctx, hd)
	b.mu.Lock()
	hd.busy--
	if err == nil || errors.Is(err, dlock.ErrLeaseLost) {
		hd.done = true
	}
	b.kick()
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
			return lostErr("the node of token %d of %q is gone", h.token, h.name)
		case !errors.Is(err, zk.ErrBadVersion):
			return b.unavailable("release "+h.path, err)
		}
	}
	for range 16 {
		r, err := b.get(ctx, h.path, false)
		if errors.Is(err, zk.ErrNoNode) {
			return lostErr("the node of token %d of %q is gone", h.token, h.name)
		}
		if err != nil {
			return b.unavailable("release "+h.path, err)
		}
		d := decodeData(r.data)
		if r.stat.Czxid != h.token || d.Owner != h.owner {
			return lostErr("the node of %q is not token %d's", h.name, h.token)
		}
		if d.Count <= 1 {
			err = b.del(ctx, h.path, r.stat.Version)
		} else {
			_, err = b.set(ctx, h.path, encodeData(d.Owner, d.Count-1), r.stat.Version)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			continue
		case errors.Is(err, zk.ErrNoNode):
			return lostErr("the node of token %d of %q is gone", h.token, h.name)
		default:
			return b.unavailable("release "+h.path, err)
		}
	}
	return b.unavailable("release "+h.path, errors.New("the node kept changing"))
}
