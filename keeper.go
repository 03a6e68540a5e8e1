package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// keeper is a Client's one renewal loop. It renews every held lease at
// TTL/3 (batched into one call when the backend is a BatchRenewer), ends
// leases whose validity deadline passes, stops renewing at MaxHold and
// releases such leases, and retries renewal errors that do not mean loss
// until the lease's deadline.
type keeper struct {
	c *Client

	mu       sync.Mutex
	leases   []*Lease // each at its slot
	started  bool
	stopped  bool
	nextWake instant // when the loop wakes next by itself; 0 before the first pass
	// addedDue is the earliest first renewal of the leases added since the
	// loop took its snapshot of leases (never if none): the pass, which
	// does not see them, sleeps no longer.
	addedDue instant
	snapshot []*Lease // the loop's copy of leases, reused
	// lead is how long after it was added the lease added last is first
	// due for renewal; a pass made on a wake-up sleeps no longer than half
	// of it.
	lead time.Duration

	wakeCh chan struct{}
	quit   chan struct{}
	done   chan struct{}
	work   sync.WaitGroup // renewals and releases in flight
	ctx    context.Context
	cancel context.CancelFunc
}

// renewConcurrency bounds the renewals in flight at once for a backend
// that cannot batch them.
const renewConcurrency = 16

func newKeeper(c *Client) *keeper {
	k := &keeper{
		c:        c,
		wakeCh:   make(chan struct{}, 1),
		addedDue: never,
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

// add starts keeping l; the loop starts with the first lease.
func (k *keeper) add(l *Lease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	l.slot = int32(len(k.leases))
	k.leases = append(k.leases, l)
	if !k.started {
		k.started = true
		go k.loop()
		return
	}
	// Wake the loop only if it would sleep past the new lease's first
	// renewal: a Lock must not cost a pass over every lease (a goroutine
	// switch and a timer). The loop sleeps until the earliest nextRenew or
	// deadline it saw, and a lease's deadline comes after its nextRenew, so
	// comparing nextRenew is enough. A lease removed since the loop last
	// looked may have set nextWake: the loop then wakes early, looks, and
	// sleeps again.
	l.mu.Lock()
	first := l.nextRenew
	l.mu.Unlock()
	k.addedDue = min(k.addedDue, first)
	k.lead = time.Duration(first - k.c.now())
	if k.nextWake == 0 || first < k.nextWake {
		k.wake()
	}
}

// remove stops keeping l.
func (k *keeper) remove(l *Lease) {
	k.mu.Lock()
	k.removeLocked(l)
	k.mu.Unlock()
}

// removeLocked takes l out of k.leases, if it is there, by moving the last
// lease into its slot.
func (k *keeper) removeLocked(l *Lease) {
	i := int(l.slot)
	if i < 0 || i >= len(k.leases) || k.leases[i] != l {
		return
	}
	last := k.leases[len(k.leases)-1]
	k.leases[i], last.slot = last, int32(i)
	k.leases[len(k.leases)-1] = nil
	k.leases = k.leases[:len(k.leases)-1]
	l.slot = -1
}

// wake makes the loop look at its leases again.
func (k *keeper) wake() {
	select {
	case k.wakeCh <- struct{}{}:
	default:
	}
}

// stop ends the loop and every renewal and release in flight, and returns
// the leases it was keeping.
func (k *keeper) stop() []*Lease {
	k.mu.Lock()
	k.stopped = true
	started := k.started
	held := k.leases
	k.leases = nil
	k.mu.Unlock()
	if started {
		close(k.quit)
		<-k.done
	}
	k.cancel()
	k.work.Wait()
	return held
}

func (k *keeper) loop() {
	defer close(k.done)
	clk := k.c.cfg.clock
	woken := true // the pass follows a wake-up (or the start), not the timer
	for {
		// The pass looks at a copy of the leases, so that Lock and Unlock
		// do not wait for it.
		k.mu.Lock()
		k.snapshot = append(k.snapshot[:0], k.leases...)
		k.addedDue = never
		k.mu.Unlock()
		now := k.c.now()
		next := now + instant(time.Hour)
		var due, ended []*Lease
		for _, l := range k.snapshot {
			switch l.tick(now, &next) {
			case tickDue:
				due = append(due, l)
			case tickOver:
				ended = append(ended, l)
			}
		}
		clear(k.snapshot) // hold no lease past its Unlock
		k.mu.Lock()
		for _, l := range ended {
			k.removeLocked(l)
		}
		next = min(next, k.addedDue)
		// A Lock woke the loop, and its lease may be gone already (a short
		// hold): sleep no longer than half the lead of a lease like it, so
		// that the Locks that follow, due no sooner (give or take their
		// round trips), need not wake it. The timer's pass then sleeps as
		// long as the leases allow.
		if bound := now + instant(k.lead/2); woken && k.lead > 0 && bound < next {
			next = bound
		}
		k.nextWake = next
		k.mu.Unlock()
		for _, l := range ended {
			if l.takeEndRelease() {
				k.work.Add(1)
				go k.release(l)
			}
		}
		if batches := k.batches(due); len(batches) > 0 {
			k.work.Add(len(batches))
			go k.renewAll(now, batches)
		}
		select {
		case <-clk.After(time.Duration(next - now)):
			woken = false
		case <-k.wakeCh:
			woken = true
		case <-k.quit:
			return
		}
	}
}

// renewBatchMax bounds the renewals of one BatchRenewer call.
const renewBatchMax = 1024

// batches divides the due leases into the renewal calls to make: one for
// a backend that cannot batch (renew runs its leases one by one), else
// calls of at most renewBatchMax leases in deadline order. A call is bound
// by its earliest deadline, so one call for 100,000 leases, slow to send,
// was cut off by its most urgent lease and every lease in it retried
// (seen under load: all lost); calls by deadline keep that to the leases
// whose time is really short.
func (k *keeper) batches(due []*Lease) [][]*Lease {
	if len(due) == 0 {
		return nil
	}
	if k.c.batch == nil || len(due) <= renewBatchMax {
		return [][]*Lease{due}
	}
	type byDeadline struct {
		l *Lease
		d instant
	}
	ds := make([]byDeadline, len(due))
	for i, l := range due {
		l.mu.Lock()
		ds[i] = byDeadline{l, l.deadline}
		l.mu.Unlock()
	}
	slices.SortFunc(ds, func(a, b byDeadline) int { return cmp.Compare(a.d, b.d) })
	for i := range ds {
		due[i] = ds[i].l
	}
	var out [][]*Lease
	for len(due) > 0 {
		n := min(len(due), renewBatchMax)
		out = append(out, due[:n:n])
		due = due[n:]
	}
	return out
}

// renewCallsMax bounds the batched renewal calls in flight at once, so
// that the goroutines of a pass stay few however many leases are held.
const renewCallsMax = 4

// renewAll makes the renewal calls of one pass, the most urgent first, at
// most renewCallsMax at once.
func (k *keeper) renewAll(now instant, batches [][]*Lease) {
	if len(batches) == 1 {
		k.renew(now, batches[0])
		return
	}
	next := make(chan []*Lease)
	var wg sync.WaitGroup
	for range min(len(batches), renewCallsMax) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				k.renew(now, b)
			}
		}()
	}
	for _, b := range batches {
		next <- b
	}
	close(next)
	wg.Wait()
}

type tickResult int

const (
	tickWait tickResult = iota
	tickDue
	tickOver
)

// tick looks at l at now: whether it is over, due for renewal (then it is
// marked as renewing), or to be looked at again by *next.
func (l *Lease) tick(now instant, next *instant) tickResult {
	l.mu.Lock()
	defer l.unlock()
	if l.err == nil && now >= l.deadline {
		l.expireLocked()
	}
	if l.err != nil {
		return tickOver
	}
	*next = min(*next, l.deadline)
	if l.renewing != nil || l.final || l.unlocked {
		return tickWait
	}
	// Renewals due within a tenth of the TTL go along with this one, so
	// that a batching backend gets them in one call. A retry after a
	// failed renewal is due at its own time only: it comes TTL/20 after
	// the failure, within that window, so it would be due again at once
	// and a store that fails fast would be retried in a busy loop.
	lead := instant(l.ttl / 10)
	if l.lastErr != nil {
		lead = 0
	}
	if now >= l.nextRenew-lead {
		l.renewing = make(chan struct{})
		return tickDue
	}
	*next = min(*next, l.nextRenew)
	return tickWait
}

// takeEndRelease reports whether the keeper must release the ended lease
// l on the backend (MaxHold), and marks it released.
func (l *Lease) takeEndRelease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.relOnEnd || l.released {
		return false
	}
	l.released = true
	return true
}

func (k *keeper) release(l *Lease) {
	defer k.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	limit := newGrace(ctx)
	defer limit.release()
	h := l.hold()
	err := bounded0(k.c, limit, ctx, func(ctx context.Context) error { return k.c.b.Release(ctx, h) }, nil)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		k.c.cfg.logger.Warn("dlock: release at MaxHold failed; the lock expires with its TTL",
			"lock", l.Name(), "backend", k.c.desc, "err", err)
	}
}

// renew renews the leases in due, which tick marked as renewing.
func (k *keeper) renew(now instant, due []*Lease) {
	defer k.work.Done()
	sent := k.c.now()
	rs := make([]Renewal, len(due))
	finals := make([]bool, len(due))
	limit := sent + instant(time.Hour)
	for i, l := range due {
		l.mu.Lock()
		var ttl time.Duration
		ttl, finals[i] = l.renewTTLLocked(sent, l.ttl)
		rs[i] = Renewal{Hold: l.hold(), TTL: ttl}
		l.capLocked(sent, ttl) // the last one before MaxHold may end the hold sooner
		limit = min(limit, l.deadline)
		l.mu.Unlock()
	}
	// A renewal answered after the earliest deadline is of no use to that
	// lease; bound the call by it.
	ctx, cancel := context.WithTimeout(k.ctx, time.Duration(limit-sent))
	defer cancel()
	// A store that does not answer holds the renewals up by CancelGrace
	// past that at most; they are retried while the leases last.
	grace := newGrace(ctx)
	defer grace.release()
	errs := make([]error, len(due))
	if k.c.batch != nil && len(rs) > 1 {
		got, err := bounded(k.c, grace, ctx, func(ctx context.Context) ([]error, error) {
			return k.c.batch.RenewBatch(ctx, rs), nil
		}, nil)
		if err != nil {
			got = nil
			for range errs {
				got = append(got, err)
			}
		}
		for i := range errs {
			if i < len(got) {
				errs[i] = got[i]
			} else {
				errs[i] = errors.New("backend returned too few batch results")
			}
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, renewConcurrency)
		for i := range rs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				errs[i] = bounded0(k.c, grace, ctx, func(ctx context.Context) error {
					return k.c.b.Renew(ctx, rs[i].Hold, rs[i].TTL)
				}, nil)
			}()
		}
		wg.Wait()
	}
	done := k.c.now()
	look := never
	for i, l := range due {
		look = min(look, l.renewed(sent, done, rs[i].TTL, finals[i], errs[i]))
	}
	k.wakeBy(look)
}

// wakeBy wakes the loop if it would sleep past t. Renewals that end wake
// it only so: a pass looks at every lease, and one per renewal call made
// the passes grow with the leases (10,000 passes over 100,000 leases per
// renewal period).
func (k *keeper) wakeBy(t instant) {
	k.mu.Lock()
	late := t < k.nextWake
	k.mu.Unlock()
	if late {
		k.wake()
	}
}

// renewed records the outcome of a renewal sent at sent, and returns
// when the keeper must look at l next.
func (l *Lease) renewed(sent, done instant, ttl time.Duration, final bool, err error) instant {
	l.traceRenew(sent, done, err)
	l.mu.Lock()
	defer l.unlock()
	ch := l.renewing
	l.renewing = nil
	if ch != nil {
		close(ch)
	}
	switch {
	case l.err != nil:
		return done
	case err == nil:
		l.final = final
		l.renewedLocked(sent, ttl)
		if final {
			return l.deadline
		}
		return l.nextRenew
	case errors.Is(err, ErrLeaseLost):
		l.endLocked(ErrLeaseLost, err, EndRenewalRefused, false, true)
		return done
	default:
		l.lastErr = err
		l.nextRenew = done + instant(retryDelay(l.ttl))
		l.c.cfg.logger.Debug("dlock: renewal failed; retrying within the lease",
			"lock", l.Name(), "backend", l.c.desc, "deadline_in", time.Duration(l.deadline-done), "err", err)
		return l.nextRenew
	}
}

// lost ends the leases of hold h, which the backend reports lost.
func (k *keeper) lost(h Hold, cause error) {
	if cause == nil || !errors.Is(cause, ErrLeaseLost) {
		cause = fmt.Errorf("%w: %v", ErrLeaseLost, cause)
	}
	var ended []*Lease
	k.mu.Lock()
	for _, l := range k.leases {
		if l.key == h.Name && l.owner == h.Owner && l.token == h.Token {
			ended = append(ended, l)
		}
	}
	k.wake()
	k.mu.Unlock()
	for _, l := range ended {
		l.mu.Lock()
		l.endLocked(ErrLeaseLost, cause, EndSessionLost, false, true)
		l.unlock()
	}
}
