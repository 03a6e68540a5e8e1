package zookeeper

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// Semaphores, read-write locks and elections: the weighted queue (see the
// package doc, "Semaphores and read-write locks").

var (
	_ dlock.Granter    = (*Backend)(nil)
	_ dlock.Downgrader = (*Backend)(nil)
)

// CanGrant says yes to every kind: the sequence order of a lock's children
// is a strict FIFO queue, and a child's grant depends only on the weights
// ahead of it, so any limit up to dlock.MaxLimit is kept exactly.
func (b *Backend) CanGrant(kind dlock.Kind, limit int) error {
	switch kind {
	case dlock.KindMutex, dlock.KindSemaphore, dlock.KindRWMutex, dlock.KindElection:
		return nil
	}
	return fmt.Errorf("%w: %w: the ZooKeeper backend does not know a %s", dlock.ErrInvalidOption, errors.ErrUnsupported, kind)
}

// nodeBytes is the data of a new child for req: a mutex's is
// {"owner","count"} as it always was; the other kinds add their shape and
// value.
func nodeBytes(req dlock.Request) []byte {
	if req.Kind == dlock.KindMutex {
		return encodeData(req.Owner, 1)
	}
	return nodeData{Owner: req.Owner, Count: 1, Kind: req.Kind, Limit: req.Limit, Weight: req.Weight, Value: req.Value}.encode()
}

// encode writes d as a child's data.
func (d nodeData) encode() []byte {
	if d.Kind == dlock.KindMutex && d.Limit == 0 && d.Weight == 0 && d.Value == "" {
		return encodeData(d.Owner, d.Count)
	}
	b, _ := json.Marshal(d)
	return b
}

// shape returns the kind, limit and weight of a child: a mutex's node
// carries none and is 1 of 1.
func (d nodeData) shape() (dlock.Kind, int, int) {
	if d.Kind == dlock.KindMutex {
		return dlock.KindMutex, 1, 1
	}
	return d.Kind, d.Limit, d.Weight
}

// badShape says what is wrong with the shape a child's data records (a
// hand-edited node), or "".
func badShape(d nodeData) string {
	switch d.Kind {
	case dlock.KindMutex:
		if d.Limit != 0 || d.Weight != 0 {
			return fmt.Sprintf("a mutex's node with limit %d and weight %d", d.Limit, d.Weight)
		}
		return ""
	case dlock.KindSemaphore, dlock.KindRWMutex, dlock.KindElection:
	default:
		return fmt.Sprintf("its kind %d is unknown", d.Kind)
	}
	switch {
	case d.Limit < 1 || d.Limit > dlock.MaxLimit:
		return fmt.Sprintf("its limit %d is outside 1..%d", d.Limit, dlock.MaxLimit)
	case d.Weight < 1 || d.Weight > d.Limit:
		return fmt.Sprintf("its weight %d is outside 1..%d, its limit", d.Weight, d.Limit)
	case d.Kind == dlock.KindRWMutex && d.Limit != dlock.RWLimit:
		return fmt.Sprintf("a read-write lock's limit %d is not %d", d.Limit, dlock.RWLimit)
	case d.Kind == dlock.KindElection && d.Limit != 1:
		return fmt.Sprintf("an election's limit %d is not 1", d.Limit)
	}
	return ""
}

// conflict is the refusal of req by a lock whose head child is d.
func conflict(d nodeData, req dlock.Request) error {
	kind, limit, _ := d.shape()
	return dlock.Conflict(kind, limit, req)
}

// acquireWeighted is Acquire for every kind but the mutex.
func (b *Backend) acquireWeighted(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	start := time.Now()
	w := &wwaiter{waiter: waiter{b: b, req: req, parent: b.lockPath(req.Name)}}
	g, err := w.look(ctx, start)
	switch {
	case err == nil:
		return g, nil, nil
	case req.Wait && errors.Is(err, dlock.ErrNotAcquired):
		return dlock.Grant{}, w, err
	}
	w.withdraw(ctx)
	return dlock.Grant{}, nil, err
}

// wwaiter is a weighted request with a node in a lock's queue. It keeps
// what it read of the children ahead of its node: nothing is ever queued
// ahead of an existing node, an owner and a shape never change, and a
// weight only goes down (a downgrade), so a stale read can only make the
// request wait longer, and a watch on a node brings its re-read.
type wwaiter struct {
	waiter
	seen    map[string]*kid            // the children ahead, by name
	watches map[string]<-chan zk.Event // pending watches, by child name
	ready   bool                       // look again without waiting
	offline bool                       // the last look failed for want of a connection
}

var _ dlock.Waiter = (*wwaiter)(nil)

// kid is a child ahead of a request's node, as the request read it.
type kid struct {
	name string
	d    nodeData
	stat zk.Stat
	gone bool
	bad  string // why its data is not dlock's
}

// queueView is the queue ahead of a request's node.
type queueView struct {
	head    *kid   // the first child that exists
	holders []*kid // the granted children, in order
	held    int    // their weight
	sum     int    // the weight ahead; a child of another shape counts as the whole limit
	waiting int    // the children ahead that wait
	pred    *kid   // the nearest child ahead when it waits
	mine    *kid   // the first holder with the request's owner
	bad     *kid   // a child ahead whose data is not dlock's
}

// look reads the queue and grants the request when the weights of the
// children up to its own fit in the limit; it re-enters the owner's hold,
// refuses a kind or limit other than the head's, and otherwise returns a
// *dlock.HeldError, having set the watches that wake the waiter (see
// watchFor) if the request waits.
func (w *wwaiter) look(ctx context.Context, start time.Time) (dlock.Grant, error) {
	req := w.req
	for range 16 {
		if w.path == "" {
			if err := w.create(ctx); err != nil {
				return dlock.Grant{}, err
			}
			if w.alone {
				// The only child: it fits (weight <= limit) and
				// nobody can wait for it to be granted.
				return w.grant(ctx, start, false), nil
			}
		}
		q, idx, err := w.position(ctx)
		switch {
		case err != nil:
			return dlock.Grant{}, err
		case idx < 0:
			w.path = "" // the node is gone with its session: queue again
			continue
		}
		if err := w.read(ctx, q[:idx]); err != nil {
			return dlock.Grant{}, err
		}
		v := w.view(q[:idx])
		if v.bad != nil {
			return dlock.Grant{}, w.b.foreign(w.parent+"/"+v.bad.name, v.bad.bad)
		}
		if v.head != nil {
			if err := conflict(v.head.d, req); err != nil {
				return dlock.Grant{}, err
			}
		}
		if v.mine != nil {
			g, err := w.reenter(ctx, v.mine, start)
			if errors.Is(err, errStale) {
				continue
			}
			return g, err
		}
		if v.sum+req.Weight <= req.Limit {
			return w.grant(ctx, start, idx < len(q)-1), nil
		}
		held := v.heldError(req)
		if !req.Wait {
			return dlock.Grant{}, held
		}
		return dlock.Grant{}, w.watchFor(ctx, v, held)
	}
	return dlock.Grant{}, w.b.unavailable("acquire "+w.parent, errors.New("the queue kept changing"))
}

// read reads the children ahead that the request has not read yet (in
// parallel), and forgets those that left.
func (w *wwaiter) read(ctx context.Context, ahead []child) error {
	if w.seen == nil {
		w.seen = make(map[string]*kid, len(ahead))
		w.watches = make(map[string]<-chan zk.Event)
	}
	if len(w.seen) > 0 {
		in := make(map[string]bool, len(ahead))
		for _, c := range ahead {
			in[c.name] = true
		}
		for name := range w.seen {
			if !in[name] {
				delete(w.seen, name)
			}
		}
	}
	var paths, names []string
	for _, c := range ahead {
		if w.seen[c.name] == nil {
			names = append(names, c.name)
			paths = append(paths, w.parent+"/"+c.name)
		}
	}
	res, errs := w.b.getMany(ctx, paths)
	for i, name := range names {
		switch err := errs[i]; {
		case errors.Is(err, zk.ErrNoNode):
			w.seen[name] = &kid{name: name, gone: true}
		case err != nil:
			return w.b.unavailable("read "+paths[i], err)
		default:
			d, bad := parseData(res[i].data, res[i].stat)
			if bad == "" {
				bad = badShape(d)
			}
			w.seen[name] = &kid{name: name, d: d, stat: *res[i].stat, bad: bad}
		}
	}
	return nil
}

// view sums the weights ahead: the children granted are a prefix of the
// queue, those whose sum with everything before them fits in the limit.
func (w *wwaiter) view(ahead []child) queueView {
	var v queueView
	for _, c := range ahead {
		k := w.seen[c.name]
		if k == nil || k.gone {
			continue
		}
		if k.bad != "" {
			v.bad = k
			return v
		}
		if v.head == nil {
			v.head = k
		}
		kind, limit, weight := k.d.shape()
		if kind != w.req.Kind || limit != w.req.Limit {
			// A request that is about to withdraw (it disagrees with
			// the head), or a mutex that came in through a race with
			// the head's release: nothing behind it while it stays.
			weight = w.req.Limit
		}
		v.sum += weight
		if v.sum <= w.req.Limit {
			v.holders = append(v.holders, k)
			v.held += weight
			if v.mine == nil && k.d.Owner == w.req.Owner {
				v.mine = k
			}
			v.pred = nil
		} else {
			v.waiting++
			v.pred = k
		}
	}
	return v
}

// heldError is the refusal of a request that does not fit.
func (v queueView) heldError(req dlock.Request) error {
	e := &dlock.HeldError{}
	if len(v.holders) > 0 {
		h := v.holders[0]
		e.Holder = dlock.Holder{Owner: h.d.Owner, Token: uint64(h.stat.Czxid)}
	}
	if req.Limit > 1 {
		e.Held, e.Limit, e.Queued = v.held, req.Limit, v.waiting
	}
	return e
}

// errStale says that a child changed under a conditional write: look again.
var errStale = errors.New("the node changed")

// reenter adds one to the count of k, a holder with the request's owner,
// and withdraws the request's own node: the owner's hold is granted again
// with its token. More weight than k holds is an upgrade, refused.
func (w *wwaiter) reenter(ctx context.Context, k *kid, start time.Time) (dlock.Grant, error) {
	b := w.b
	if w.req.Weight > k.d.Weight {
		return dlock.Grant{}, fmt.Errorf("holds %d, asks %d: %w", k.d.Weight, w.req.Weight, dlock.ErrUpgrade)
	}
	path := w.parent + "/" + k.name
	d := k.d
	d.Count++
	_, err := b.set(ctx, path, d.encode(), k.stat.Version)
	switch {
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		delete(w.seen, k.name)
		return dlock.Grant{}, errStale
	case err != nil:
		return dlock.Grant{}, b.unavailable("re-enter "+path, err)
	}
	delete(w.seen, k.name)
	w.withdraw(ctx)
	sid, _ := b.session()
	h := &hold{path: path, owner: w.req.Owner, token: k.stat.Czxid, session: ownSession(sid, k.stat.EphemeralOwner)}
	b.addHold(h, start.Add(w.req.TTL), verified{})
	return dlock.Grant{Token: uint64(k.stat.Czxid), Count: d.Count, Handle: h}, nil
}

// grant makes the request's node a hold. When the listing showed children
// after it, one of them may be waiting for this node to be granted (see
// watchFor): a write of the node's data (the same data, at version 0)
// fires that waiter's watch. It costs the contended grant one request; a
// failed write only delays the next waiter until this hold ends.
func (w *wwaiter) grant(ctx context.Context, start time.Time, touch bool) dlock.Grant {
	fresh := true
	if touch {
		w.b.set(ctx, w.path, nodeBytes(w.req), 0)
		fresh = false // the release reads the data version
	}
	h := &hold{path: w.path, owner: w.req.Owner, token: w.czxid, session: w.session, fresh: fresh}
	w.b.addHold(h, start.Add(w.req.TTL), w.ver)
	w.path = ""
	return dlock.Grant{Token: uint64(w.czxid), Count: 1, Handle: h}
}

// watchFor sets the watches that wake a waiting request, and returns held.
//
// When the nearest child ahead waits too, the request cannot be granted
// before it: it watches that child alone, whose deletion or grant (which
// writes its data, see grant) wakes it. Otherwise the request is the first
// waiter: it watches the fewest holders, heaviest first, whose weight
// alone keeps it out, so that it is woken when one of them leaves or is
// downgraded, and by nothing else. A watch set earlier that is still
// pending is kept (a second one on the same node would stay registered in
// go-zookeeper until the node changes). A node that changed since it was
// read is read again at once.
func (w *wwaiter) watchFor(ctx context.Context, v queueView, held error) error {
	want := v.holders
	if v.pred != nil {
		want = []*kid{v.pred}
	} else {
		want = slices.Clone(want)
		slices.SortStableFunc(want, func(a, b *kid) int { return cmp.Compare(b.d.Weight, a.d.Weight) })
		room, sum := w.req.Limit-w.req.Weight, 0
		for i, k := range want {
			if sum += k.d.Weight; sum > room {
				want = want[:i+1]
				break
			}
		}
	}
	w.ready = false
	for _, k := range want {
		if ch, ok := w.watches[k.name]; ok {
			select {
			case ev, ok := <-ch:
				w.fired(k.name, ev, ok)
				w.ready = true
			default:
			}
			continue
		}
		path := w.parent + "/" + k.name
		st, ch, err := w.b.existsW(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			k.gone = true
			w.ready = true
			continue
		case err != nil:
			return w.b.unavailable("watch "+path, err)
		}
		w.watches[k.name] = ch
		if st.Version != k.stat.Version {
			delete(w.seen, k.name)
			w.ready = true
		}
	}
	return held
}

// fired takes in the event of the watch on child name.
func (w *wwaiter) fired(name string, ev zk.Event, ok bool) {
	delete(w.watches, name)
	if k := w.seen[name]; k != nil && ok && ev.Type == zk.EventNodeDeleted {
		k.gone = true
	} else {
		delete(w.seen, name) // changed, or no longer watched: read again
	}
}

// Wait blocks until a watched child is deleted or changed, the session's
// state changes, or ctx is done.
func (w *wwaiter) Wait(ctx context.Context) error {
	b := w.b
	if w.offline {
		w.offline = false
		return b.waitConnected(ctx)
	}
	if w.ready || len(w.watches) == 0 {
		w.ready = false
		return ctx.Err()
	}
	names := make([]string, 0, len(w.watches))
	cases := make([]reflect.SelectCase, 0, len(w.watches)+3)
	for name, ch := range w.watches {
		names = append(names, name)
		cases = append(cases, recvCase(ch))
	}
	n := len(cases)
	cases = append(cases, recvCase(ctx.Done()), recvCase(b.sessionChanged()), recvCase(b.quit))
	i, v, ok := reflect.Select(cases)
	switch {
	case i < n:
		var ev zk.Event
		if ok {
			ev = v.Interface().(zk.Event)
		}
		w.fired(names[i], ev, ok)
	case i == n:
		return ctx.Err()
	case i == n+2:
		return dlock.ErrClosed
	}
	return nil
}

func recvCase[T any](ch <-chan T) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// Acquire looks at the queue again; a failure of the connection is not
// acquired, and the next Wait waits for the session (see waiter.Acquire).
func (w *wwaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	g, err := w.look(ctx, time.Now())
	if err != nil && errors.Is(err, dlock.ErrBackendUnavailable) && ctx.Err() == nil {
		w.offline = true
		return dlock.Grant{}, fmt.Errorf("%w: waiting for ZooKeeper: %w", dlock.ErrNotAcquired, err)
	}
	return g, err
}

// Cancel deletes the waiter's node, which wakes the waiter behind it.
func (w *wwaiter) Cancel(ctx context.Context) error {
	return w.withdraw(ctx)
}

// getMany reads paths, up to 64 at once.
func (b *Backend) getMany(ctx context.Context, paths []string) ([]getResult, []error) {
	res := make([]getResult, len(paths))
	errs := make([]error, len(paths))
	if len(paths) == 1 {
		res[0], errs[0] = b.get(ctx, paths[0], false)
		return res, errs
	}
	var wg sync.WaitGroup
	limit := make(chan struct{}, 64)
	for i, p := range paths {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer func() { <-limit; wg.Done() }()
			res[i], errs[i] = b.get(ctx, p, false)
		}()
	}
	wg.Wait()
	return res, errs
}

// childPaths returns the paths of the children q of parent.
func childPaths(parent string, q []child) []string {
	paths := make([]string, len(q))
	for i, c := range q {
		paths[i] = parent + "/" + c.name
	}
	return paths
}

// weightedHoldOf finds the node of a hold of a weighted kind made
// elsewhere (a Hold without a Handle): the child with h's token and owner.
func (b *Backend) weightedHoldOf(ctx context.Context, h dlock.Hold) (*hold, error) {
	parent := b.lockPath(h.Name)
	kids, err := b.children(ctx, parent)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, lostErr("lock %q is not held", h.Name)
	}
	if err != nil {
		return nil, b.unavailable("list "+parent, err)
	}
	paths := childPaths(parent, queue(kids))
	res, errs := b.getMany(ctx, paths)
	for i, err := range errs {
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, b.unavailable("read "+paths[i], err)
		}
		if uint64(res[i].stat.Czxid) == h.Token && decodeData(res[i].data).Owner == h.Owner {
			sid, _ := b.session()
			return &hold{path: paths[i], owner: h.Owner, token: res[i].stat.Czxid, session: ownSession(sid, res[i].stat.EphemeralOwner)}, nil
		}
	}
	return nil, lostErr("token %d no longer holds %q", h.Token, h.Name)
}

// Downgrade lowers the weight of hold h in place (a writer becoming a
// reader): a write of its node's data, conditional on the version read,
// which fires the watch of the first waiter if it watches the node.
func (b *Backend) Downgrade(ctx context.Context, h dlock.Hold, weight int) error {
	return b.rewrite(ctx, h, "downgrade", func(d *nodeData) error {
		if weight < 1 || weight > d.Weight {
			return fmt.Errorf("holds %d, asks %d: %w", d.Weight, weight, dlock.ErrUpgrade)
		}
		d.Weight = weight
		return nil
	})
}

// rewrite changes the data of hold h's node with edit, conditional on the
// data version it read; h must still hold the node.
func (b *Backend) rewrite(ctx context.Context, h dlock.Hold, what string, edit func(*nodeData) error) error {
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
	for range 16 {
		r, err := b.get(ctx, hd.path, false)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return lostErr("the node of token %d of %q is gone", hd.token, hd.name())
		case err != nil:
			return b.unavailable(what+" "+hd.path, err)
		}
		d, bad := parseData(r.data, r.stat)
		if bad == "" {
			bad = badShape(d)
		}
		switch {
		case r.stat.Czxid != hd.token || d.Owner != hd.owner:
			return lostErr("the node of %q is not token %d's", hd.name(), hd.token)
		case bad != "":
			return b.foreign(hd.path, bad)
		}
		if err := edit(&d); err != nil {
			return err
		}
		_, err = b.set(ctx, hd.path, d.encode(), r.stat.Version)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			continue
		case errors.Is(err, zk.ErrNoNode):
			return lostErr("the node of token %d of %q is gone", hd.token, hd.name())
		default:
			return b.unavailable(what+" "+hd.path, err)
		}
	}
	return b.unavailable(what+" "+hd.path, errors.New("the node kept changing"))
}

// inspectWeighted lists the holders of a lock whose head child is of a
// weighted kind or an election: the children whose weights, summed in
// sequence order, fit in the head's limit.
func (b *Backend) inspectWeighted(ctx context.Context, name, parent string, q []child) ([]dlock.LockInfo, error) {
	paths := childPaths(parent, q)
	res, errs := b.getMany(ctx, paths)
	var out []dlock.LockInfo
	var head *nodeData
	sum, live, blocked := 0, 0, false
	for i, err := range errs {
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, b.unavailable("read "+paths[i], err)
		}
		live++
		d, bad := parseData(res[i].data, res[i].stat)
		if bad == "" {
			bad = badShape(d)
		}
		info := dlock.LockInfo{Name: name, Owner: d.Owner, Token: uint64(res[i].stat.Czxid), Count: d.Count}
		if bad != "" {
			// Acquisitions fail on it: it holds up everything behind.
			if !blocked {
				info.Bad = "node " + paths[i] + ": " + bad
				out = append(out, info)
			}
			blocked = true
			continue
		}
		kind, limit, weight := d.shape()
		if head == nil {
			head = &d
		}
		hk, hl, _ := head.shape()
		if kind != hk || limit != hl {
			weight = hl
		}
		if sum += weight; blocked || sum > hl {
			blocked = true
			continue
		}
		info.Kind, info.Limit, info.Weight, info.Value = kind, limit, weight, d.Value
		out = append(out, info)
	}
	for i := range out {
		out[i].Waiters = live - len(out)
	}
	return out, nil
}
