package zookeeper

import (
	"context"
	"errors"
	"fmt"
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
type hold struct {
	path    string
	name    string // the lock name, for messages
	owner   string
	token   int64 // the node's czxid
	own     bool  // the node is in this backend's session
	session int64 // that session, when own
	fresh   bool  // own node granted at data version 0 with count 1

	// Guarded by Backend.mu.
	expires time.Time       // release unless renewed by then (start of the last renewal + TTL)
	watch   <-chan zk.Event // the node's watch, left by its last renewal in a batch; nil if none
	busy    int             // renewals and releases in flight
	lost    error           // why the hold is lost, nil while valid
	done    bool            // released, or lost and cleaned up
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
	for h := range b.holds {
		if h.own && h.session == sid && h.lost == nil && !h.done {
			h.lost = lostErr("%s (session 0x%x)", cause, sid)
			n++
			if b.onLoss != nil {
				b.onLoss(dlock.Hold{Name: h.name, Owner: h.owner, Token: uint64(h.token), Handle: h}, h.lost)
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
	for h := range b.holds {
		switch {
		case h.done:
			delete(b.holds, h)
		case h.busy > 0:
		case h.lost != nil:
			if !h.own || h.session != b.sid {
				// The node is in someone else's session, or its
				// session is gone and the node with it.
				h.done = true
				delete(b.holds, h)
			} else if b.connected {
				h.busy++
				jobs = append(jobs, func(ctx context.Context) error { return b.dropLost(ctx, h) })
			}
		case !now.Before(h.expires):
			if b.connected {
				h.busy++
				jobs = append(jobs, func(ctx context.Context) error { return b.releaseAbandoned(ctx, h) })
			}
		default:
			next = min(next, max(h.expires.Sub(now), abandonSlack))
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
			b.cfg.logger.Debug("dlock: zookeeper: released a hold not renewed within its TTL", "lock", h.name, "backend", b.desc, "token", h.token)
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
