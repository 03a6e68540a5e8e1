package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// The items of elections and watching.

// electionOneLeader: candidates on several clients campaign in turns; at
// most one leads at a time, terms strictly increase, and a resign hands
// over to a waiting candidate.
func (s *suite) electionOneLeader() {
	s.grants(dlock.KindElection)
	name := s.name("el")
	var leaders atomic.Int64
	var mu sync.Mutex
	var terms []uint64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := s.client(dlock.TTL(10 * time.Second)).Election(name)
			for i := range 5 {
				l, err := e.Campaign(s.ctx(time.Minute), fmt.Sprintf("candidate-%d/%d", g, i))
				if err != nil {
					s.t.Error(err)
					return
				}
				if leaders.Add(1) > 1 {
					s.t.Error("two leaders at once")
				}
				mu.Lock()
				terms = append(terms, l.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				leaders.Add(-1)
				if err := e.Resign(s.ctx(time.Minute)); err != nil {
					s.t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			s.t.Errorf("term %d after %d: terms must strictly increase in the order of leadership", terms[i], terms[i-1])
		}
	}
}

// electionObserve: Observe sends the leader, its new value, "no leader"
// after a resign, and the next leader, in order, never an older term.
func (s *suite) electionObserve() {
	s.grants(dlock.KindElection)
	name := s.name("eo")
	c := s.client()
	e := c.Election(name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := s.client().Election(name).Observe(ctx)
	next := func(want string) dlock.Leader {
		s.t.Helper()
		select {
		case ld, ok := <-obs:
			if !ok {
				s.t.Fatalf("Observe closed waiting for %s", want)
			}
			if ld.Err != nil {
				s.t.Fatalf("Observe waiting for %s: %v", want, ld.Err)
			}
			return ld
		case <-ctx.Done():
			s.t.Fatalf("Observe sent nothing waiting for %s", want)
		}
		return dlock.Leader{}
	}
	if ld := next("no leader at first"); ld.Owner != "" {
		s.t.Fatalf("first observed %+v, want no leader", ld)
	}
	if _, err := e.Leader(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrNoLeader) {
		s.t.Errorf("Leader with none: %v, want ErrNoLeader", err)
	}
	l, err := e.Campaign(s.ctx(time.Minute), "a:1")
	if err != nil {
		s.t.Fatal(err)
	}
	if ld := next("the leader"); ld.Owner != l.Owner() || ld.Value != "a:1" || ld.Term != l.Token() {
		s.t.Errorf("observed %+v, want owner %s value a:1 term %d", ld, l.Owner(), l.Token())
	}
	if ld, err := s.client().Election(name).Leader(s.ctx(time.Minute)); err != nil || ld.Value != "a:1" || ld.Term != l.Token() {
		s.t.Errorf("Leader: %+v, %v", ld, err)
	}
	if err := e.Proclaim(s.ctx(time.Minute), "a:2"); err != nil {
		s.t.Fatalf("Proclaim: %v", err)
	}
	if ld := next("the new value"); ld.Value != "a:2" || ld.Term != l.Token() {
		s.t.Errorf("after Proclaim observed %+v, want value a:2 term %d", ld, l.Token())
	}
	if err := e.Resign(s.ctx(time.Minute)); err != nil {
		s.t.Fatal(err)
	}
	if ld := next("no leader after the resign"); ld.Owner != "" {
		s.t.Errorf("after Resign observed %+v, want no leader", ld)
	}
	l2, err := s.client().Election(name).Campaign(s.ctx(time.Minute), "b:1")
	if err != nil {
		s.t.Fatal(err)
	}
	if ld := next("the next leader"); ld.Term != l2.Token() || ld.Term <= l.Token() || ld.Value != "b:1" {
		s.t.Errorf("observed %+v, want the next leader with term %d > %d", ld, l2.Token(), l.Token())
	}
	s.unlock(l2)
}

// electionLeaderLost: a leader that stops renewing (paused, killed) is
// told of its loss before the next leader is elected: the next term
// starts after the old lease's Deadline.
func (s *suite) electionLeaderLost() {
	s.grants(dlock.KindElection)
	name := s.name("ek")
	cb := &crashable{Backend: s.f(s.t)}
	a := s.clientOn(cb, dlock.TTL(s.cfg.ttl))
	old, err := a.Election(name).Campaign(s.ctx(time.Minute), "old")
	if err != nil {
		s.t.Fatal(err)
	}
	cb.noRenew.Store(true)
	next, err := s.client().Election(name).Campaign(s.ctx(time.Minute), "next")
	if err != nil {
		s.t.Fatal(err)
	}
	granted := time.Now()
	if old.Err() == nil {
		s.t.Errorf("the next leader was elected while the old one's Err() was nil")
	}
	if !old.Deadline().Before(granted) {
		s.t.Errorf("the next leader was elected at %v, before the old lease's Deadline %v", granted, old.Deadline())
	}
	if next.Token() <= old.Token() {
		s.t.Errorf("term %d after %d", next.Token(), old.Token())
	}
	s.unlock(next)
}

// electionInput: bad values and calls out of turn are refused; a
// cancelled campaign leaves nothing behind.
func (s *suite) electionInput() {
	s.grants(dlock.KindElection)
	name := s.name("ei")
	c := s.client()
	e := c.Election(name)
	if _, err := e.Campaign(s.ctx(time.Minute), ""); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Campaign with an empty value: %v, want ErrInvalidOption", err)
	}
	if _, err := e.Campaign(s.ctx(time.Minute), string(make([]byte, dlock.MaxValueLen+1))); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Campaign with an oversized value: %v, want ErrInvalidOption", err)
	}
	if err := e.Proclaim(s.ctx(time.Minute), "x"); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Proclaim when not leading: %v, want ErrInvalidOption", err)
	}
	if err := e.Resign(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Resign when not leading: %v, want ErrInvalidOption", err)
	}
	l, err := e.Campaign(s.ctx(time.Minute), "me")
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := e.Campaign(s.ctx(time.Minute), "me"); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Campaign while leading: %v, want ErrInvalidOption", err)
	}
	wc := s.waiterClient()
	ctx, cancel := context.WithCancel(context.Background())
	res, err := startWaitingFn(wc, name, func() (*dlock.Lease, error) { return wc.Election(name).Campaign(ctx, "waiting") })
	if err != nil {
		s.t.Fatal(err)
	}
	cancel()
	if r := <-res; !errors.Is(r.err, dlock.ErrNotAcquired) {
		s.t.Errorf("a cancelled campaign: %v, want ErrNotAcquired", r.err)
	}
	if err := e.Resign(s.ctx(time.Minute)); err != nil {
		s.t.Fatal(err)
	}
	_ = l
	s.noState(c, name)

	// A name held as a mutex is not an election.
	mname := s.name("em")
	m := s.lock(c.Mutex(mname))
	select {
	case ld := <-c.Election(mname).Observe(s.ctx(time.Minute)):
		if !errors.Is(ld.Err, dlock.ErrInvalidOption) {
			s.t.Errorf("Observe of a mutex: %+v, want an error matching ErrInvalidOption", ld)
		}
	case <-time.After(time.Minute):
		s.t.Error("Observe of a mutex sent nothing")
	}
	if _, err := c.Election(mname).Campaign(s.ctx(time.Minute), "x"); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Campaign on a mutex: %v, want ErrInvalidOption", err)
	}
	s.unlock(m)
	c.Close()
	if _, err := c.Election(name).Campaign(s.ctx(time.Minute), "late"); !errors.Is(err, dlock.ErrClosed) {
		s.t.Errorf("Campaign after Close: %v, want ErrClosed", err)
	}
}

// watchHolders: Client.Watch sends the holders of a name as they change,
// pushed by the store: a grant, a second grant, a release — two holders
// of a semaphore of 2, or, where the backend grants none, two readers of
// an RWMutex; where it grants neither (a session lock without a shared
// mode), one mutex holder after another.
func (s *suite) watchHolders() {
	name := s.name("wh")
	c := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := s.client()
	hs, err := wc.Watch(ctx, name)
	if errors.Is(err, dlock.ErrInvalidOption) && errors.Is(err, errors.ErrUnsupported) && strings.Contains(err.Error(), wc.String()) {
		s.t.Skipf("the backend cannot list holders, so it cannot be watched: %v", err)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	want := func(n int) {
		s.t.Helper()
		for {
			select {
			case h := <-hs:
				if h.Err != nil {
					s.t.Fatalf("Watch: %v", h.Err)
				}
				if len(h.Holders) == n {
					return
				}
			case <-ctx.Done():
				s.t.Fatalf("Watch never showed %d holders", n)
			}
		}
	}
	want(0)
	var acquire func() (*dlock.Lease, error)
	switch {
	case s.granted(dlock.KindSemaphore) == nil:
		sem := c.Semaphore(name, 2)
		acquire = func() (*dlock.Lease, error) { return sem.Acquire(s.ctx(time.Minute)) }
	case s.granted(dlock.KindRWMutex) == nil:
		rw := c.RWMutex(name)
		acquire = func() (*dlock.Lease, error) { return rw.RLock(s.ctx(time.Minute)) }
	default:
		for range 2 {
			l := s.lock(s.client().Mutex(name))
			want(1)
			s.unlock(l)
			want(0)
		}
		return
	}
	a, err := acquire()
	if err != nil {
		s.t.Fatal(err)
	}
	want(1)
	b, err := acquire()
	if err != nil {
		s.t.Fatal(err)
	}
	want(2)
	s.unlock(a)
	want(1)
	s.unlock(b)
	want(0)
}
