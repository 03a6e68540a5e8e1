package dlocktest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// The items of the weighted kinds (semaphores and read-write locks). A
// backend that refuses a kind (see dlock.Granter) must refuse it cleanly:
// grants skips the item after checking the refusal.

// grants skips the item if the backend does not grant kind, after
// checking that the refusal is an ErrInvalidOption naming the backend.
func (s *suite) grants(kind dlock.Kind) {
	s.t.Helper()
	if err := s.granted(kind); err != nil {
		s.t.Skipf("the backend refuses a %s: %v", kind, err)
	}
}

// granted returns nil if the backend grants kind (a semaphore of 2, or
// of 1 for the mutex items run through one), and its refusal otherwise,
// which must be an ErrInvalidOption naming the lock and the backend.
func (s *suite) granted(kind dlock.Kind) error {
	s.t.Helper()
	c := s.client()
	var err error
	var l *dlock.Lease
	name := s.name("kind")
	switch kind {
	case dlock.KindSemaphore:
		limit := 2
		if s.via == dlock.KindSemaphore {
			limit = 1
		}
		l, err = c.Semaphore(name, limit).TryAcquire(s.ctx(time.Minute))
	case dlock.KindElection:
		l, err = c.Election(name).Campaign(s.ctx(time.Minute), "probe")
	default:
		l, err = c.RWMutex(name).TryRLock(s.ctx(time.Minute))
	}
	if err == nil {
		s.unlock(l)
		return nil
	}
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), c.String()) || !strings.Contains(err.Error(), name) {
		s.t.Fatalf("a backend that refuses a %s must say so with ErrInvalidOption naming the lock and the backend; got %v", kind, err)
	}
	return err
}

// semaphoreLimit: a semaphore of 3 grants 3 permits at once and refuses a
// 4th; under contention from several clients, with weights 1 and 2, the
// weight held never exceeds the limit and tokens never repeat.
func (s *suite) semaphoreLimit() {
	s.grants(dlock.KindSemaphore)
	const limit = 3
	name := s.name("sem")
	c := s.client()
	var held []*dlock.Lease
	for i := range limit {
		l, err := c.Semaphore(name, limit).TryAcquire(s.ctx(time.Minute))
		if err != nil {
			s.t.Fatalf("TryAcquire %d of a semaphore of %d: %v", i+1, limit, err)
		}
		held = append(held, l)
	}
	if l, err := s.client().Semaphore(name, limit).TryAcquire(s.ctx(time.Minute)); err == nil {
		l.Unlock(context.Background())
		s.t.Fatalf("a 4th permit of a semaphore of %d was granted", limit)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		s.t.Fatalf("a 4th permit: %v, want ErrNotAcquired", err)
	}
	for _, l := range held {
		s.unlock(l)
	}

	var inUse, peak atomic.Int64
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := 1 + g%2
			sem := s.client(dlock.TTL(10*time.Second)).Semaphore(name, limit, dlock.Weight(w))
			for range max(s.cfg.grants/20, 5) {
				l, err := sem.Acquire(s.ctx(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				n := inUse.Add(int64(w))
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				mu.Lock()
				dup := tokens[l.Token()]
				tokens[l.Token()] = true
				mu.Unlock()
				if dup {
					errs <- errors.New("a token was granted twice")
				}
				time.Sleep(time.Millisecond)
				inUse.Add(-int64(w))
				if err := l.Unlock(s.ctx(time.Minute)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Error(err)
	}
	if p := peak.Load(); p > limit {
		s.t.Errorf("%d weight held at once of a semaphore of %d", p, limit)
	}
	s.noState(c, name)
}

// rwExclusion: readers share, a writer excludes readers and writers, under
// contention from several clients.
func (s *suite) rwExclusion() {
	s.grants(dlock.KindRWMutex)
	name := s.name("rw")
	c := s.client()
	r1, err := c.RWMutex(name).TryRLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("TryRLock: %v", err)
	}
	r2, err := s.client().RWMutex(name).TryRLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("a second reader's TryRLock while a reader holds: %v", err)
	}
	if l, err := s.client().RWMutex(name).TryLock(s.ctx(time.Minute)); err == nil {
		l.Unlock(context.Background())
		s.t.Fatal("TryLock granted a writer while two readers hold")
	}
	s.unlock(r1)
	s.unlock(r2)

	var readers, writers atomic.Int64
	var bad atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := s.client(dlock.TTL(10 * time.Second)).RWMutex(name)
			for range max(s.cfg.grants/20, 5) {
				write := g%3 == 0
				var l *dlock.Lease
				var err error
				if write {
					l, err = rw.Lock(s.ctx(time.Minute))
				} else {
					l, err = rw.RLock(s.ctx(time.Minute))
				}
				if err != nil {
					s.t.Error(err)
					return
				}
				if write {
					if writers.Add(1) > 1 || readers.Load() > 0 {
						bad.Add(1)
					}
				} else if readers.Add(1); writers.Load() > 0 {
					bad.Add(1)
				}
				time.Sleep(time.Millisecond)
				if write {
					writers.Add(-1)
				} else {
					readers.Add(-1)
				}
				if err := l.Unlock(s.ctx(time.Minute)); err != nil {
					s.t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		s.t.Errorf("%d grants overlapped a writer", n)
	}
	s.noState(c, name)
}

// weightedTokens: every grant of a name, of any kind, has a token above
// every earlier grant's; a writer's is above the readers' before it.
func (s *suite) weightedTokens() {
	s.grants(dlock.KindRWMutex)
	name := s.name("wt")
	c := s.client()
	rw := c.RWMutex(name)
	var last uint64
	for i := range 3 {
		r1 := s.rlock(rw)
		r2 := s.rlock(s.client().RWMutex(name))
		w, err := s.client().RWMutex(name).TryLock(s.ctx(time.Minute))
		if err == nil {
			s.t.Fatal("a writer was granted beside two readers")
		}
		if r1.Token() <= last || r2.Token() <= r1.Token() {
			s.t.Errorf("round %d: reader tokens %d, %d after %d do not increase", i, r1.Token(), r2.Token(), last)
		}
		s.unlock(r1)
		s.unlock(r2)
		w, err = rw.Lock(s.ctx(time.Minute))
		if err != nil {
			s.t.Fatal(err)
		}
		if w.Token() <= r2.Token() {
			s.t.Errorf("writer token %d is not above the readers' %d", w.Token(), r2.Token())
		}
		last = w.Token()
		s.unlock(w)
	}
}

func (s *suite) rlock(rw *dlock.RWMutex) *dlock.Lease {
	s.t.Helper()
	l, err := rw.RLock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("RLock(%q): %v", rw.Name(), err)
	}
	return l
}

// permitExpiry: the permit of a holder that stopped renewing (crashed)
// frees after its TTL and is reported lost.
func (s *suite) permitExpiry() {
	s.grants(dlock.KindSemaphore)
	name := s.name("pe")
	cb := &crashable{Backend: s.f(s.t)}
	a := s.clientOn(cb, dlock.TTL(s.cfg.ttl))
	lost, err := a.Semaphore(name, 1).Acquire(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatal(err)
	}
	cb.crash()
	l, err := s.client().Semaphore(name, 1).Acquire(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatalf("Acquire after the holder crashed: %v", err)
	}
	if err := lost.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Errorf("the crashed holder's permit: Err() = %v after another was granted, want ErrLeaseLost", err)
	}
	if l.Token() <= lost.Token() {
		s.t.Errorf("token %d after expiry is not above the expired permit's %d", l.Token(), lost.Token())
	}
	s.unlock(l)
}

// writerNotStarved: once a writer waits, later readers wait behind it
// (TryRLock fails although only readers hold), and the writer is granted
// before them when the readers leave.
func (s *suite) writerNotStarved() {
	s.grants(dlock.KindRWMutex)
	name := s.name("ws")
	r1 := s.rlock(s.client().RWMutex(name))
	wc := s.waiterClient()
	writer, err := startWaitingFn(wc, name, func() (*dlock.Lease, error) { return wc.RWMutex(name).Lock(s.ctx(time.Minute)) })
	if err != nil {
		s.t.Fatal(err)
	}
	if l, err := s.client().RWMutex(name).TryRLock(s.ctx(time.Minute)); err == nil {
		l.Unlock(context.Background())
		s.t.Fatal("a new reader was granted while a writer waited: writers can starve")
	}
	rc := s.waiterClient()
	reader, err := startWaitingFn(rc, name, func() (*dlock.Lease, error) { return rc.RWMutex(name).RLock(s.ctx(time.Minute)) })
	if err != nil {
		s.t.Fatal(err)
	}
	s.unlock(r1)
	w := <-writer
	if w.err != nil {
		s.t.Fatalf("the waiting writer: %v", w.err)
	}
	select {
	case r := <-reader:
		s.t.Fatalf("a reader that asked after the writer was granted while the writer held: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	s.unlock(w.l)
	r := <-reader
	if r.err != nil {
		s.t.Fatalf("the reader behind the writer: %v", r.err)
	}
	if r.l.Token() <= w.l.Token() {
		s.t.Errorf("the reader's token %d is not above the writer's %d", r.l.Token(), w.l.Token())
	}
	s.unlock(r.l)
}

// downgrade: a writer becomes a reader in place — other readers come in,
// a waiting writer does not — and keeps its token.
func (s *suite) downgrade() {
	s.grants(dlock.KindRWMutex)
	name := s.name("dg")
	c := s.client()
	w, err := c.RWMutex(name).Lock(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatal(err)
	}
	wc := s.waiterClient()
	other, err := startWaitingFn(wc, name, func() (*dlock.Lease, error) { return wc.RWMutex(name).Lock(s.ctx(time.Minute)) })
	if err != nil {
		s.t.Fatal(err)
	}
	err = w.Downgrade(s.ctx(time.Minute))
	if errors.Is(err, dlock.ErrInvalidOption) && errors.Is(err, errors.ErrUnsupported) {
		s.unlock(w)
		if r := <-other; r.err == nil {
			s.unlock(r.l)
		}
		s.t.Skipf("the backend cannot downgrade: %v", err)
	}
	if err != nil {
		s.t.Fatalf("Downgrade: %v", err)
	}
	if w.Weight() != 1 || w.Err() != nil {
		s.t.Errorf("after Downgrade: weight %d, Err %v; want 1, nil", w.Weight(), w.Err())
	}
	select {
	case r := <-other:
		s.t.Fatalf("a waiting writer came in at a downgrade: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := w.Downgrade(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Downgrade of a read lease: %v, want ErrInvalidOption", err)
	}
	s.unlock(w)
	r := <-other
	if r.err != nil {
		s.t.Fatalf("the writer after the downgraded reader left: %v", r.err)
	}
	if r.l.Token() <= w.Token() {
		s.t.Errorf("the writer's token %d is not above the downgraded one's %d", r.l.Token(), w.Token())
	}
	s.unlock(r.l)
}

// weightedInput: a weight above the limit, a bad limit, a kind or limit
// other than the store's, and an upgrade are refused at once with
// ErrInvalidOption naming the lock and the backend, and change nothing.
// The semaphore part runs where semaphores of 2 are granted, the
// read-write part where read-write locks are.
func (s *suite) weightedInput() {
	sem := s.granted(dlock.KindSemaphore) == nil
	if !sem {
		s.grants(dlock.KindRWMutex)
	}
	name := s.name("wi")
	c := s.client()
	check := func(what string, l *dlock.Lease, err error) {
		s.t.Helper()
		if err == nil {
			l.Unlock(context.Background())
			s.t.Errorf("%s was granted", what)
			return
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), c.String()) {
			s.t.Errorf("%s: %v, want ErrInvalidOption naming %q and %q", what, err, name, c.String())
		}
	}
	if sem {
		s.semaphoreInput(c, name, check)
	}
	if s.skipRW() {
		return
	}
	name = s.name("up")
	rw := c.RWMutex(name, dlock.Owner("reader-1"))
	r := s.rlock(rw)
	l, err := s.client().Mutex(name).Lock(s.ctx(time.Minute))
	check("a mutex over a read lock", l, err)
	var conflict *dlock.ConflictError
	if !errors.As(err, &conflict) || conflict.Kind != dlock.KindRWMutex || conflict.AskedKind != dlock.KindMutex {
		s.t.Errorf("a kind conflict: %v, want a *ConflictError naming the read-write lock and the mutex", err)
	}
	l, err = rw.Lock(s.ctx(time.Minute))
	if !errors.Is(err, dlock.ErrUpgrade) {
		if l != nil {
			l.Unlock(context.Background())
		}
		s.t.Errorf("an upgrade by the reader's owner: %v, want ErrUpgrade", err)
	}
	l, err = rw.Lock(dlock.WithLease(s.ctx(time.Minute), r))
	if !errors.Is(err, dlock.ErrUpgrade) {
		if l != nil {
			l.Unlock(context.Background())
		}
		s.t.Errorf("an upgrade through WithLease: %v, want ErrUpgrade", err)
	}
	if err := r.Err(); err != nil {
		s.t.Errorf("the reader after refused requests: %v", err)
	}
	s.unlock(r)
	if err := r.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("RUnlock twice: %v, want ErrUnlocked", err)
	}
	s.noState(c, name)
}

// semaphoreInput is weightedInput's semaphore part, on name.
func (s *suite) semaphoreInput(c *dlock.Client, name string, check func(string, *dlock.Lease, error)) {
	l, err := c.Semaphore(name, 2, dlock.Weight(3)).Acquire(s.ctx(time.Minute))
	check("a weight of 3 of a semaphore of 2", l, err)
	l, err = c.Semaphore(name, 0).Acquire(s.ctx(time.Minute))
	check("a semaphore of 0", l, err)
	l, err = c.Semaphore(name, dlock.MaxLimit+1).Acquire(s.ctx(time.Minute))
	check("a semaphore above MaxLimit", l, err)

	held, err := c.Semaphore(name, 2).Acquire(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatal(err)
	}
	l, err = c.Semaphore(name, 3).Acquire(s.ctx(time.Minute))
	check("a semaphore of 3 over one of 2", l, err)
	var conflict *dlock.ConflictError
	if !errors.As(err, &conflict) || conflict.Limit != 2 || conflict.AskedLimit != 3 {
		s.t.Errorf("a limit conflict: %v, want a *ConflictError naming 2 and 3", err)
	}
	l, err = c.Mutex(name).Lock(s.ctx(time.Minute))
	check("a mutex over a semaphore", l, err)
	l, err = c.RWMutex(name).TryRLock(s.ctx(time.Minute))
	check("a read lock over a semaphore", l, err)
	if err := held.Err(); err != nil {
		s.t.Errorf("the holder after refused requests: %v", err)
	}
	second, err := c.Semaphore(name, 2).TryAcquire(s.ctx(time.Minute))
	if err != nil {
		s.t.Errorf("the second permit after refused requests: %v", err)
	} else {
		s.unlock(second)
	}
	s.unlock(held)
	if err := held.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("Unlock twice: %v, want ErrUnlocked", err)
	}
	s.noState(c, name)
}

// skipRW reports whether the backend refuses read-write locks.
func (s *suite) skipRW() bool {
	l, err := s.client().RWMutex(s.name("rw?")).TryRLock(s.ctx(time.Minute))
	if err == nil {
		s.unlock(l)
	}
	return err != nil
}

// weightedQueue: x/sync's head-of-line rule and cancellation. A request
// that would fit is not granted ahead of an earlier waiter; a waiter that
// gives up leaves nothing and holds up nobody.
func (s *suite) weightedQueue() {
	s.grants(dlock.KindSemaphore)
	name := s.name("wq")
	c := s.client(dlock.TTL(time.Minute))
	one, err := c.Semaphore(name, 2).Acquire(s.ctx(time.Minute))
	if err != nil {
		s.t.Fatal(err)
	}
	bc := s.waiterClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heavy, err := startWaitingFn(bc, name, func() (*dlock.Lease, error) {
		return bc.Semaphore(name, 2, dlock.Weight(2)).Acquire(ctx)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if l, err := s.client().Semaphore(name, 2).TryAcquire(s.ctx(time.Minute)); err == nil {
		l.Unlock(context.Background())
		s.t.Fatal("a permit of weight 1 was granted ahead of a waiting permit of weight 2")
	}
	lc := s.waiterClient()
	light, err := startWaitingFn(lc, name, func() (*dlock.Lease, error) {
		return lc.Semaphore(name, 2).Acquire(s.ctx(time.Minute))
	})
	if err != nil {
		s.t.Fatal(err)
	}
	cancel() // the heavy waiter gives up: the light one behind it now fits
	if r := <-heavy; !errors.Is(r.err, dlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		s.t.Fatalf("the cancelled waiter: %v, want ErrNotAcquired and context.Canceled", r.err)
	}
	r := <-light
	if r.err != nil {
		s.t.Fatalf("the waiter behind a cancelled one: %v", r.err)
	}
	s.unlock(r.l)
	s.unlock(one)
	s.noState(c, name)
}

// noState checks that a name whose permits were all released has no
// holders left (as Inspect sees them).
func (s *suite) noState(c *dlock.Client, name string) {
	s.t.Helper()
	in, ok := c.Backend().(dlock.Inspector)
	if !ok {
		return
	}
	infos, err := in.Inspect(s.ctx(time.Minute), name)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	for _, info := range infos {
		if info.Name == name {
			s.t.Errorf("after every permit was released, Inspect shows %+v", info)
		}
	}
}
