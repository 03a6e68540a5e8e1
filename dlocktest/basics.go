package dlocktest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

func (s *suite) exclusion() {
	const goroutines, clients = 16, 4
	name := s.name("x")
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		cs[i] = s.client()
	}
	// The counter and the last token are guarded by the lock under test
	// only. They are read and written with separate atomic operations so
	// that the race detector, which cannot see the synchronization a remote
	// store provides, stays quiet, while a read-modify-write by two holders
	// at once still loses an update.
	var (
		inside   atomic.Int32
		counter  atomic.Int64
		lastTok  atomic.Uint64
		overlaps atomic.Int32
		wg       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := s.mutex(cs[g%clients], name)
			for range s.cfg.grants {
				l, err := m.Lock(s.ctx(time.Minute))
				if err != nil {
					s.t.Errorf("Lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if last := lastTok.Load(); l.Token() <= last {
					s.t.Errorf("token %d granted after token %d", l.Token(), last)
				}
				lastTok.Store(l.Token())
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				if err := l.Err(); err != nil {
					s.t.Errorf("lease lost inside the critical section: %v", err)
				}
				inside.Add(-1)
				if err := l.Unlock(s.ctx(time.Minute)); err != nil {
					s.t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		s.t.Errorf("%d grants overlapped another holder", n)
	}
	if want := int64(goroutines * s.cfg.grants); counter.Load() != want {
		s.t.Errorf("counter = %d after %d grants: updates were lost", counter.Load(), want)
	}
}

func (s *suite) tokensIncrease() {
	name := s.name("t")
	a, b := s.client(), s.client()
	var last uint64
	for i := range 20 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l := s.lock(s.mutex(c, name))
		if l.Token() <= last {
			s.t.Fatalf("grant %d: token %d is not above the previous %d", i, l.Token(), last)
		}
		last = l.Token()
		if l.Holds() != 1 {
			s.t.Fatalf("grant %d: Holds() = %d, want 1", i, l.Holds())
		}
		s.unlock(l)
	}
	// Another name has its own sequence, which also only goes up.
	l := s.lock(s.mutex(a, s.name("t2")))
	if l.Token() == 0 {
		s.t.Fatalf("token 0 granted")
	}
	s.unlock(l)
}

func (s *suite) invalidInput() {
	c := s.client()
	ctx := s.ctx(time.Minute)
	long := make([]byte, dlock.MaxNameLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, name := range []string{"", string(long), "bad\xffutf8", "nul\x00byte"} {
		for op, try := range map[string]func(*dlock.Mutex) (*dlock.Lease, error){
			"Lock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.Lock(ctx) }, "TryLock": func(m *dlock.Mutex) (*dlock.Lease, error) { return m.TryLock(ctx) },
		} {
			l, err := try(c.Mutex(name))
			if !errors.Is(err, dlock.ErrInvalidName) || l != nil {
				s.t.Errorf("%s(%q) = %v, %v; want ErrInvalidName", op, name, l, err)
			}
		}
	}
	// The longest name, and names with what stores treat specially, work.
	for _, name := range []string{s.prefix + string(long[len(s.prefix)+1:]), s.name("a/b/../c d"), s.name("ünï/cödé 🔒"), s.name("%2F:*?[]{}\\'\"")} {
		l, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			s.t.Errorf("TryLock(%q): %v", name, err)
			continue
		}
		if l.Name() != name {
			s.t.Errorf("lease name %q, want %q", l.Name(), name)
		}
		s.unlock(l)
	}
	name := s.name("opts")
	for what, opts := range map[string][]dlock.Option{
		"zero TTL":            {dlock.TTL(0)},
		"negative TTL":        {dlock.TTL(-time.Second)},
		"TTL below MinTTL":    {dlock.TTL(dlock.MinTTL - 1)},
		"MaxHold below TTL":   {dlock.TTL(time.Second), dlock.MaxHold(time.Second / 2)},
		"negative MaxHold":    {dlock.MaxHold(-time.Second)},
		"empty Owner":         {dlock.Owner("")},
		"client-only option":  {dlock.Drift(0.1)},
		"invalid UTF-8 owner": {dlock.Owner("\xff")},
		"NUL in Owner":        {dlock.Owner("a\x00b")},
		"Owner too long":      {dlock.Owner(string(long))},
	} {
		l, err := c.Mutex(name, opts...).TryLock(ctx)
		if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
			s.t.Errorf("%s: TryLock = %v, %v; want ErrInvalidOption", what, l, err)
		}
	}
	// Nothing was acquired by the refused calls.
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock after refused calls: %v", err)
	}
	s.unlock(l)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("second Unlock: %v, want ErrUnlocked", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("Err() after Unlock: %v, want ErrUnlocked", err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrUnlocked) {
		s.t.Errorf("Extend after Unlock: %v, want ErrUnlocked", err)
	}
	nb := s.f(s.t)
	defer nb.Close()
	if _, err := dlock.New(nb, dlock.Owner("x")); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("New with a Mutex-only option: %v, want ErrInvalidOption", err)
	}
}

func (s *suite) manyNames() {
	n := s.cfg.names
	a, b := s.client(), s.client()
	leases := make([]*dlock.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l, err := a.Mutex(s.name(fmt.Sprintf("many/%04d", i))).TryLock(s.ctx(time.Minute))
			if err != nil {
				errs <- err
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("TryLock of a free name: %v", err)
	}
	for i := 0; i < n; i += n / 10 {
		s.mustBeHeld(b, leases[i].Name())
	}
	if in, ok := a.Backend().(dlock.Inspector); ok {
		infos, err := in.Inspect(s.ctx(time.Minute), s.name("many/"))
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		if len(infos) != n {
			s.t.Errorf("Inspect lists %d held locks, want %d", len(infos), n)
		}
	}
	errs = make(chan error, n)
	for _, l := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := l.Unlock(s.ctx(time.Minute)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("Unlock: %v", err)
	}
	if in, ok := a.Backend().(dlock.Inspector); ok {
		infos, err := in.Inspect(s.ctx(time.Minute), s.name("many/"))
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		if len(infos) != 0 {
			s.t.Errorf("after releasing all, Inspect lists %d held locks, e.g. %+v", len(infos), infos[0])
		}
	}
	for i := 0; i < n; i += n / 10 {
		s.unlock(s.mustBeFree(b, leases[i].Name(), "after release"))
	}
}

func (s *suite) closeWithLocksHeld() {
	a, b := s.waiterClient(), s.client()
	var held []*dlock.Lease
	for i := range 3 {
		held = append(held, s.lock(a.Mutex(s.name(fmt.Sprint("held", i)))))
	}
	// A waiter of client a, on a lock held by b.
	bl := s.lock(b.Mutex(s.name("busy")))
	waiting := s.waitFor(a, s.name("busy"), s.ctx(time.Minute))
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if r := <-waiting; !errors.Is(r.err, dlock.ErrClosed) {
		s.t.Errorf("Lock waiting during Close: %v, want ErrClosed", r.err)
	}
	for _, l := range held {
		select {
		case <-l.Done():
		default:
			s.t.Errorf("lease %q not Done after Close", l.Name())
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrClosed) {
			s.t.Errorf("lease Err() after Close = %v, want ErrLeaseLost and ErrClosed", err)
		}
		// Close released it: another client takes it at once.
		l2, err := b.Mutex(l.Name()).TryLock(s.ctx(time.Minute))
		if err != nil {
			s.t.Errorf("TryLock after the holder's client closed: %v", err)
			continue
		}
		s.unlock(l2)
		if err := l.Unlock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrClosed) {
			s.t.Errorf("Unlock after Close: %v, want ErrClosed", err)
		}
	}
	if _, err := a.Mutex(s.name("after")).Lock(s.ctx(time.Minute)); !errors.Is(err, dlock.ErrClosed) {
		s.t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); !errors.Is(err, dlock.ErrClosed) {
		s.t.Errorf("second Close: %v, want ErrClosed", err)
	}
	s.unlock(bl)
}
