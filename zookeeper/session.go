package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// The session of a Backend, and the holds that depend on it.
//
// A hold is lost (Renew and Release return ErrLeaseLost) when:
//   - its node is gone or is no longer the one it was granted (Renew reads
//     the node's stat each time: existence, czxid, ephemeralOwner);
//   - the session it was granted in ended: ZooKeeper said it expired, or a
//     new session replaced it;
//   - the session clock ran out: no request of the session (pings
//     included, see wire) was answered for the session timeout, so the
//     servers may have expired the session and handed the lock on. This is
//     decided on the client's own clock as soon as it happens, without
//     waiting for a reconnection to learn that the session expired;
//   - with LossOnDisconnect, the connection was lost after the grant.
//
// A hold that is lost while its node may still exist (its session lived
// on) has its node deleted by the monitor as soon as the session is
// connected, so that nobody waits behind a lock that no one holds. So has
// a hold that its lease stopped renewing for longer than its TTL.

// hold is the backend's state of one grant; it is the Grant's Handle.
//
// A Client holding many leases keeps one per lease, so it is kept small
// (80 bytes): the lock name is derived from path when a message needs it,
// the expiry is an offset on the backend's monotonic clock, the rare
// cause of a loss sits behind a pointer, and the backend finds it in a
// slice (Backend.holds) rather than a map.
type hold struct {
	path    string
	owner   string
	token   int64 // the node's czxid
	session int64 // the node's session when it is this backend's (see own), else 0

	// Guarded by Backend.mu.
	expires int64  // release unless renewed by then (start of the last renewal + TTL), as Backend.instant
	lost    *error // why the hold is lost, nil while valid (see lostErr and lose)
	slot    int32  // 1 + the hold's index in Backend.holds; 0 when not there
	gen     uint32 // the connection whose recursive watch guards the node since it was last seen (see RenewBatch); 0 if none
	busy    int16  // renewals and releases in flight (a few at most)
	fresh   bool   // own node granted at data version 0 with count 1 (set once)
	done    bool   // released, or lost and cleaned up
	gone    bool   // the recursive watch saw the node deleted
}

// own reports whether hd's node is in this backend's session (an
// ephemeral node's owner is never session 0).
func (hd *hold) own() bool { return hd.session != 0 }

// ownSession returns the session of a hold on a node whose ephemeral
// owner is eo, sid being the backend's session: sid when they match, else
// 0 (a node of another session: see hold.own).
func ownSession(sid, eo int64) int64 {
	if sid != 0 && eo == sid {
		return sid
	}
	return 0
}

// name returns the name of hd's lock, for messages: the node's parent is
// the escaped name.
func (hd *hold) name() string {
	parent := hd.path[:max(strings.LastIndexByte(hd.path, '/'), 0)]
	name, _ := unescape(parent[strings.LastIndexByte(parent, '/')+1:])
	return name
}

// lostErr returns why hd is lost, or nil. Backend.mu is held.
func (hd *hold) lostErr() error {
	if hd.lost == nil {
		return nil
	}
	return *hd.lost
}

// lose records err as why hd is lost and returns it. Backend.mu is held.
func (hd *hold) lose(err error) error {
	hd.lost = &err
	return err
}

// orphan is a node of this session that nobody uses any more: a waiter
// whose withdrawal failed, or a create whose caller gave up.
type orphan struct {
	parent  string
	path    string // "" when only the guid is known
	guid    string
	session int64
}

// clockDrift is the share of the session timeout that the session clock
// keeps in reserve for a difference between the client's and the servers'
// clock rates, as dlock's own Drift does for leases.
const clockDrift = dlock.DefaultDrift

// onSession is called by wire with every connect response.
func (b *Backend) onSession(id int64, timeout time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != 0 && timeout > 0 {
		b.timeout = timeout
	}
	b.pending = id
}

// onEvent is go-zookeeper's event callback of an own connection. It runs
// on go-zookeeper's goroutines and must not block.
func (b *Backend) onEvent(ev zk.Event) {
	if ev.Type == zk.EventNodeDeleted {
		b.nodeDeleted(ev.Path)
		return
	}
	if ev.Type != zk.EventSession {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev.State {
	case zk.StateHasSession:
		b.setSessionLocked(b.pending)
	case zk.StateExpired:
		b.disconnectedLocked()
		b.loseLocked(b.sid, "ZooKeeper expired the session")
	case zk.StateDisconnected, zk.StateConnecting, zk.StateAuthFailed:
		b.disconnectedLocked()
	}
}

// poll samples the state of a connection made by the caller (New).
func (b *Backend) poll() {
	state, id := b.conn.State(), b.conn.SessionID()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case state == zk.StateHasSession && id != 0:
		if !b.connected || id != b.sid {
			b.setSessionLocked(id)
		}
	case state == zk.StateExpired:
		b.disconnectedLocked()
		b.loseLocked(b.sid, "ZooKeeper expired the session")
	default:
		b.disconnectedLocked()
	}
}

func (b *Backend) setSessionLocked(id int64) {
	if b.sid != 0 && id != b.sid {
		b.loseLocked(b.sid, "the session ended (a new session replaced it)")
	}
	b.sid = id
	b.connected = true
	b.signalLocked()
}

func (b *Backend) disconnectedLocked() {
	if !b.connected {
		return
	}
	b.connected = false
	b.epoch++
	if b.cfg.loss == LossOnDisconnect {
		b.loseLocked(b.sid, "the connection to ZooKeeper was lost (loss policy: disconnect)")
	}
	b.signalLocked()
}

// loseLocked marks every valid hold on a node of session sid as lost.
func (b *Backend) loseLocked(sid int64, cause string) {
	if sid == 0 {
		return
	}
	n := 0
	for _, h := range b.holds {
		if h.own() && h.session == sid && h.lost == nil && !h.done {
			err := h.lose(lostErr("%s (session 0x%x)", cause, sid))
			n++
			if b.onLoss != nil {
				b.onLoss(dlock.Hold{Name: h.name(), Owner: h.owner, Token: uint64(h.token), Handle: h}, err)
			}
		}
	}
	if n > 0 {
		b.cfg.logger.Warn("dlock: zookeeper: leases lost", "backend", b.desc, "holds", n, "cause", cause)
	}
	b.signalLocked()
}

// signalLocked wakes whoever waits for a change of the session, and the
// monitor.
func (b *Backend) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
	b.kick()
}

func (b *Backend) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// sessionChanged returns a channel closed at the next change of the
// session's state.
func (b *Backend) sessionChanged() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

func (b *Backend) markAlive(t time.Time) {
	if b.wire != nil {
		b.wire.markAlive(t)
		return
	}
	b.mu.Lock()
	if t.After(b.alive) {
		b.alive = t
	}
	b.mu.Unlock()
}

func (b *Backend) lastAliveLocked() time.Time {
	if b.wire != nil {
		return b.wire.lastAlive()
	}
	return b.alive
}

// session returns the current session id and whether it is connected.
func (b *Backend) session() (int64, bool) {
	if b.wire == nil {
		b.poll() // the caller's connection: look now, not at the next poll
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sid, b.connected
}

// waitConnected waits until the session is connected or ctx ends.
func (b *Backend) waitConnected(ctx context.Context) error {
	for {
		b.mu.Lock()
		ok, closed, ch := b.connected, b.closed, b.changed
		b.mu.Unlock()
		if closed {
			return dlock.ErrClosed
		}
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// monitor runs the session clock, cleans up after lost and abandoned holds
// and orphaned nodes, and (with New) polls the connection's state.
func (b *Backend) monitor() {
	defer b.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
		case <-b.wake:
		}
		if b.wire == nil {
			b.poll()
		}
		t.Reset(b.sweep())
	}
}

// abandonSlack is how much later than its expiry the monitor may look at
// a hold that its lease stopped renewing: a pass looks at every hold, and
// waking at each hold's own expiry made the passes grow with the holds.
const abandonSlack = time.Second

// pollInterval is how often a Backend made by New samples its connection.
const pollInterval = 50 * time.Millisecond

// sweep does one round of the monitor's work and returns how long to wait
// before the next.
func (b *Backend) sweep() time.Duration {
	now := time.Now()
	nowAt := b.instant(now)
	next := time.Hour
	if b.wire == nil {
		next = pollInterval
	}
	var jobs []func(context.Context) error
	b.mu.Lock()
	// The session clock. With an own connection the pings keep alive
	// fresh while the connection works, so it runs all the time and also
	// catches a connection that died without go-zookeeper noticing yet.
	if b.sid != 0 && (b.wire != nil || !b.connected) {
		if alive := b.lastAliveLocked(); !alive.IsZero() {
			limit := alive.Add(time.Duration(float64(b.timeout) * (1 - clockDrift)))
			if !now.Before(limit) {
				if b.lostSid != b.sid || b.lostAt.Before(alive) {
					b.lostSid, b.lostAt = b.sid, alive
					b.loseLocked(b.sid, fmt.Sprintf("no answer from ZooKeeper for the session timeout %v", b.timeout))
				}
			} else {
				next = min(next, limit.Sub(now))
			}
		}
	}
	// Backwards, so that forgetting a hold (which moves the last one into
	// its place) skips none.
	for i := len(b.holds) - 1; i >= 0; i-- {
		h := b.holds[i]
		switch {
		case h.done:
			b.forgetLocked(h)
		case h.busy > 0:
		case h.lost != nil && h.gone:
			h.done = true // nothing to delete
			b.forgetLocked(h)
		case h.lost != nil:
			if !h.own() || h.session != b.sid {
				// The node is in someone else's session, or its
				// session is gone and the node with it.
				h.done = true
				b.forgetLocked(h)
			} else if b.connected {
				h.busy++
				jobs = append(jobs, func(ctx context.Context) error { return b.dropLost(ctx, h) })
			}
		case nowAt >= h.expires:
			if b.connected {
				h.busy++
				jobs = append(jobs, func(ctx context.Context) error { return b.releaseAbandoned(ctx, h) })
			}
		default:
			next = min(next, max(time.Duration(h.expires-nowAt), abandonSlack))
		}
	}
	keep := b.orphans[:0]
	for _, o := range b.orphans {
		switch {
		case o.session != b.sid:
			// Gone with its session.
		case b.connected:
			jobs = append(jobs, func(ctx context.Context) error { return b.dropOrphan(ctx, o) })
		default:
			keep = append(keep, o)
		}
	}
	b.orphans = keep
	timeout := min(b.timeout, maxRequestTimeout)
	b.sweepAt = now.Add(next) // the jobs below can only bring it forward
	b.mu.Unlock()

	failed := false
	for _, job := range jobs {
		ctx, cancel := context.WithTimeout(b.ctx, timeout)
		if err := job(ctx); err != nil {
			failed = true
			b.cfg.logger.Debug("dlock: zookeeper: clean-up failed; retrying", "backend", b.desc, "err", err)
		}
		cancel()
	}
	if failed {
		next = min(next, time.Second)
	}
	return max(next, time.Millisecond)
}

// dropLost deletes the node of a lost own hold if it is still there.
func (b *Backend) dropLost(ctx context.Context, h *hold) error {
	err := b.del(ctx, h.path, -1)
	b.mu.Lock()
	defer b.mu.Unlock()
	h.busy--
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		h.done = true
		return nil
	}
	return err
}

// releaseAbandoned releases a hold whose lease stopped renewing it for
// longer than its TTL: the lease is over on the client's side, and the
// session lives on, so nothing else would free the lock.
func (b *Backend) releaseAbandoned(ctx context.Context, h *hold) error {
	err := b.releaseNode(ctx, h)
	b.mu.Lock()
	defer b.mu.Unlock()
	h.busy--
	if err == nil || errors.Is(err, dlock.ErrLeaseLost) {
		h.done = true
		if err == nil {
			b.cfg.logger.Debug("dlock: zookeeper: released a hold not renewed within its TTL", "lock", h.name(), "backend", b.desc, "token", h.token)
		}
		return nil
	}
	return err
}

// dropOrphan deletes a node that nobody uses.
func (b *Backend) dropOrphan(ctx context.Context, o orphan) error {
	path := o.path
	if path == "" {
		kids, err := b.children(ctx, o.parent)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			b.addOrphan(o)
			return err
		}
		for _, k := range kids {
			if childGUID(k) == o.guid {
				path = o.parent + "/" + k
			}
		}
		if path == "" {
			return nil
		}
	}
	if err := b.del(ctx, path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		b.addOrphan(orphan{parent: o.parent, path: path, guid: o.guid, session: o.session})
		return err
	}
	return nil
}

func (b *Backend) addOrphan(o orphan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.orphans = append(b.orphans, o)
	b.kick()
}

// The recursive watch: the holds of a backend that holds many are guarded
// by one persistent recursive watch on the root (see wire.arm), instead of
// a watch per node, which go-zookeeper keeps in about 260 bytes per node.
// A deletion that it reports reaches nodeDeleted, which marks the hold of
// that node; a batch of renewals then needs one request for every hold
// that the watch has guarded since its node was last seen (see RenewBatch).

// armHolds is how many holds make the backend set the recursive watch.
// The watch brings a notification for every change under the root, the
// other clients' included, for as long as the connection lasts: a backend
// holding fewer leases (every short-lived lock, 32 goroutines on distinct
// names) renews each with a request of its own instead.
const armHolds = 256

// deletedRing is how many of the latest node deletions the backend keeps,
// for the holds being granted while they come (see verified).
const deletedRing = 256

// verified is what makes a hold guarded by the recursive watch from its
// grant on, without a request: the generation of the connection on which
// the node was made after the watch was set (0: not so), and how many
// deletions had been seen before.
type verified struct {
	gen uint32
	seq uint64
}

// verifyStart is called before a request that sees a node: it returns the
// generation of the connection if the recursive watch was asked for on it,
// and the count of deletions seen.
func (b *Backend) verifyStart() verified {
	if b.wire == nil {
		return verified{}
	}
	g := b.wire.sentGen()
	b.mu.Lock()
	defer b.mu.Unlock()
	return verified{gen: g, seq: b.evSeq}
}

// verifyEnd is called when the request of v answered that the node is
// there: v is still good if the watch was set and the connection is the
// same, so that every later deletion of the node comes to nodeDeleted.
func (b *Backend) verifyEnd(v verified) verified {
	if v.gen == 0 || b.wire.watchGen() != v.gen {
		return verified{}
	}
	return v
}

// deletedSinceLocked reports whether path may have been deleted among the
// deletions seen after the first seq. b.mu is held.
func (b *Backend) deletedSinceLocked(path string, seq uint64) bool {
	if b.evSeq-seq >= deletedRing {
		return true // forgotten: maybe
	}
	for k := seq + 1; k <= b.evSeq; k++ {
		if b.deleted[k%deletedRing] == path {
			return true
		}
	}
	return false
}

// nodeDeleted handles the notification of a node's deletion. A valid own
// hold of the current session on that node is lost at once and reported
// to the Client; one with a request in flight (its own release, say) is
// only marked, and the request finds out.
func (b *Backend) nodeDeleted(path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.evSeq++
	b.deleted[b.evSeq%deletedRing] = path
	hd := b.byPath[path]
	if hd == nil {
		return
	}
	hd.gone = true
	if hd.busy > 0 || hd.done || hd.lost != nil || !hd.own() || hd.session != b.sid || b.closed {
		return
	}
	err := hd.lose(lostErr("the node of token %d of %q was deleted", hd.token, hd.name()))
	if b.onLoss != nil {
		b.onLoss(dlock.Hold{Name: hd.name(), Owner: hd.owner, Token: uint64(hd.token), Handle: hd}, err)
	}
	b.kick()
}

// wantWatchLocked reports whether the backend holds enough leases to set
// the recursive watch, and it is not set on the current connection (a
// new connection has none). b.mu is held.
func (b *Backend) wantWatchLocked() bool {
	return b.wire != nil && len(b.holds) >= armHolds && !b.closed && b.wire.watchGen() == 0
}

// armSoonLocked sets the recursive watch in the background if the backend
// wants it. b.mu is held.
func (b *Backend) armSoonLocked() {
	if !b.wantWatchLocked() || !b.arming.CompareAndSwap(false, true) {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.arming.Store(false)
		b.wire.arm(b.ctx)
	}()
}
