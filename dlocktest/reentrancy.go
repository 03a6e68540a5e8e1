package dlocktest

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
)

func (s *suite) reentrantOwner() {
	name := s.name("o")
	owner := "dlocktest-owner-" + randHex(4)
	a, a2, b := s.client(), s.client(), s.client()
	outer := s.lock(s.mutex(a, name, dlock.Owner(owner)))
	if outer.Owner() != owner || outer.Holds() != 1 {
		s.t.Fatalf("outer lease: owner %q holds %d, want %q and 1", outer.Owner(), outer.Holds(), owner)
	}
	// The same owner through another client (another process) re-enters.
	inner, err := s.mutex(a2, name, dlock.Owner(owner)).TryLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("reentrant TryLock: %v", err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 {
		s.t.Fatalf("reentrant lease: token %d holds %d, want token %d holds 2", inner.Token(), inner.Holds(), outer.Token())
	}
	inner2 := s.lock(s.mutex(a, name, dlock.Owner(owner)))
	if inner2.Token() != outer.Token() || inner2.Holds() != 3 {
		s.t.Fatalf("second reentrant lease: token %d holds %d, want token %d holds 3", inner2.Token(), inner2.Holds(), outer.Token())
	}
	s.mustBeHeld(b, name)
	s.unlock(inner2)
	s.mustBeHeld(b, name)
	s.unlock(inner)
	s.mustBeHeld(b, name)
	s.unlock(outer)
	l := s.mustBeFree(b, name, "after all reentrant holds were released")
	if l.Token() <= outer.Token() {
		s.t.Errorf("token %d after release is not above %d", l.Token(), outer.Token())
	}
	s.unlock(l)
}

func (s *suite) reentrantContext() {
	name := s.name("c")
	a, b := s.client(), s.client()
	m := s.mutex(a, name)
	outer := s.lock(m)
	ctx := dlock.WithLease(s.ctx(time.Minute), outer)
	inner, err := m.Lock(ctx)
	if err != nil {
		s.t.Fatalf("Lock with the outer lease in the context: %v", err)
	}
	if inner.Token() != outer.Token() || inner.Holds() != 2 || inner.Owner() != outer.Owner() {
		s.t.Fatalf("reentrant lease: token %d holds %d owner %q, want token %d holds 2 owner %q",
			inner.Token(), inner.Holds(), inner.Owner(), outer.Token(), outer.Owner())
	}
	// Without the context, the same Mutex does not re-enter.
	if l, err := m.TryLock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l.Unlock(context.Background())
		}
		s.t.Fatalf("TryLock without the lease in the context: %v, want ErrNotAcquired", err)
	}
	// A lease of another name in the context changes nothing.
	other := s.lock(s.mutex(a, s.name("c-other")))
	if l, err := m.TryLock(dlock.WithLease(s.ctx(time.Minute), other)); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l.Unlock(context.Background())
		}
		s.t.Fatalf("TryLock with another lock's lease in the context: %v, want ErrNotAcquired", err)
	}
	s.unlock(other)
	s.unlock(inner)
	s.mustBeHeld(b, name)
	s.unlock(outer)
	l := s.mustBeFree(b, name, "after both holds were released")
	s.unlock(l)
	// A lost or released outer lease does not let anyone re-enter.
	if _, err := m.Lock(dlock.WithLease(s.ctx(time.Minute), outer)); !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Fatalf("Lock with a released lease in the context: %v, want an error", err)
	}
}
