package dlocktest

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
)

// abandon takes name on a crashable client with the short TTL and crashes
// it: the backend still holds the lock until its TTL runs out.
func (s *suite) abandon(name string) (*dlock.Lease, *crashable) {
	s.t.Helper()
	cb := &crashable{Backend: s.f(s.t)}
	a := s.clientOn(cb, dlock.TTL(s.cfg.ttl))
	l := s.lock(s.mutex(a, name))
	cb.crash()
	return l, cb
}

func (s *suite) expiryAfterAbandon() {
	name := s.name("e")
	b := s.client()
	lost, _ := s.abandon(name)
	l := s.lock(s.mutex(b, name)) // waits for the expiry
	if err := lost.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("when another owner was granted the lock, the abandoned lease's Err() = %v, want ErrLeaseLost", err)
	}
	select {
	case <-lost.Done():
	default:
		s.t.Errorf("when another owner was granted the lock, the abandoned lease's Done() was open")
	}
	if err := lost.Context().Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, context.DeadlineExceeded) {
		s.t.Errorf("abandoned lease's Context().Err() = %v, want ErrLeaseLost and context.DeadlineExceeded", err)
	}
	if l.Token() <= lost.Token() {
		s.t.Errorf("token after expiry %d is not above the expired holder's %d", l.Token(), lost.Token())
	}
	s.unlock(l)
}

func (s *suite) releaseAfterLoss() {
	name := s.name("r")
	lost, _ := s.abandon(name)
	b, other := s.client(), s.client()
	l := s.lock(s.mutex(b, name))
	// The crashed process comes back and releases: its backend is gone, so
	// replay the release on a live backend as the stale holder would.
	live := s.f(s.t)
	defer live.Close()
	rel := dlock.Hold{Name: name, Owner: lost.Owner(), Token: lost.Token()}
	if err := live.Release(s.ctx(time.Minute), rel); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("stale release: %v, want ErrLeaseLost", err)
	}
	if err := live.Renew(s.ctx(time.Minute), rel, time.Minute); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("stale renewal: %v, want ErrLeaseLost", err)
	}
	if err := lost.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Unlock of the lost lease: %v, want ErrLeaseLost", err)
	}
	// The new holder is untouched.
	s.mustBeHeld(other, name)
	if err := l.Extend(s.ctx(time.Minute), dlock.DefaultTTL); err != nil {
		s.t.Errorf("the new holder's Extend after a stale release: %v", err)
	}
	s.unlock(l)
}

func (s *suite) renewal() {
	name := s.name("n")
	ttl := s.cfg.ttl
	a, b := s.client(dlock.TTL(ttl)), s.client()
	l := s.lock(s.mutex(a, name))
	first := l.Deadline()
	end := time.Now().Add(5*ttl + ttl/2)
	for time.Now().Before(end) {
		if err := l.Err(); err != nil {
			s.t.Fatalf("lease lost while renewing: %v", err)
		}
		s.mustBeHeld(b, name)
		time.Sleep(ttl / 4)
	}
	if !l.Deadline().After(first.Add(4 * ttl)) {
		s.t.Errorf("after 5.5 TTLs the deadline moved from %v to %v only", first, l.Deadline())
	}
	// The context's Deadline keeps context.Context's contract: it does
	// not move with the renewals (none without MaxHold).
	if dl, ok := l.Context().Deadline(); ok {
		s.t.Errorf("Context().Deadline() = %v, %v without MaxHold; want none", dl, ok)
	}
	s.unlock(l)
}

func (s *suite) maxHold() {
	name := s.name("m")
	ttl := s.cfg.ttl
	a, b := s.client(), s.client()
	// MaxHold counts from when the acquisition was sent, so the hold is
	// measured from before Lock: a Lock slowed by load returns late.
	start := time.Now()
	l := s.lock(s.mutex(a, name, dlock.TTL(ttl), dlock.MaxHold(2*ttl)))
	select {
	case <-l.Done():
	case <-time.After(2*ttl + 10*time.Second):
		s.t.Fatalf("lease not over %v after a MaxHold of %v", time.Since(start), 2*ttl)
	}
	if held := time.Since(start); held < 2*ttl-ttl/2 {
		s.t.Errorf("lease with MaxHold %v ended after %v", 2*ttl, held)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Err() after MaxHold = %v, want ErrLeaseLost", err)
	}
	// The lock frees: released at MaxHold, or at worst expired one TTL later.
	l2 := s.lock(s.mutex(b, name))
	if l2.Token() <= l.Token() {
		s.t.Errorf("token after MaxHold %d is not above %d", l2.Token(), l.Token())
	}
	s.unlock(l2)
	if err := l.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("Unlock after MaxHold: %v, want ErrLeaseLost", err)
	}
}

func (s *suite) extend() {
	name := s.name("ext")
	ttl := s.cfg.ttl
	cb := &crashable{Backend: s.f(s.t)}
	a, b := s.clientOn(cb, dlock.TTL(ttl)), s.client()
	l := s.lock(s.mutex(a, name))
	before := l.Deadline()
	if err := l.Extend(s.ctx(time.Minute), 10*ttl); err != nil {
		s.t.Fatalf("Extend: %v", err)
	}
	if !l.Deadline().After(before.Add(5 * ttl)) {
		s.t.Errorf("Extend(%v) moved the deadline from %v to %v", 10*ttl, before, l.Deadline())
	}
	// With background renewals failing from now on, the lock is held for
	// the extended TTL, not the original one.
	cb.noRenew.Store(true)
	time.Sleep(3 * ttl)
	s.mustBeHeld(b, name)
	if err := l.Err(); err != nil {
		s.t.Errorf("lease lost within its extended TTL: %v", err)
	}
	if err := l.Extend(s.ctx(time.Minute), 0); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Extend(0): %v, want ErrInvalidOption", err)
	}
	s.unlock(l)
}

// minHold: with MinHold, a lease unlocked early leaves its name taken
// until MinHold after the grant, by the store; a backend whose holds do
// not outlive the client refuses MinHold with ErrInvalidOption.
func (s *suite) minHold() {
	name := s.name("mh")
	d := 4 * s.cfg.ttl
	a := s.client(dlock.TTL(s.cfg.ttl))
	if det, ok := a.Backend().(dlock.Detacher); !ok || !det.CanDetach() {
		if _, err := a.Mutex(name, dlock.MinHold(d)).TryLock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrInvalidOption) {
			s.t.Fatalf("MinHold on a backend that cannot detach: %v, want ErrInvalidOption", err)
		}
		s.t.Skip("the backend's holds do not outlive the client: MinHold is refused")
	}
	l := s.lock(a.Mutex(name, dlock.MinHold(d)))
	granted := time.Now()
	s.unlock(l)
	a.Close() // no process left: the store keeps the name
	b := s.client()
	if time.Since(granted) < d/2 {
		s.mustBeHeld(b, name)
	}
	l2 := s.lock(b.Mutex(name))
	if took := time.Since(granted); took < d-d/10 {
		s.t.Errorf("granted again %v after the grant, before MinHold %v", took, d)
	}
	if l2.Token() <= l.Token() {
		s.t.Errorf("token %d after MinHold is not above %d", l2.Token(), l.Token())
	}
	s.unlock(l2)
}
