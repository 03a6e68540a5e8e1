package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// waitFor starts Lock on m in a goroutine and returns once the backend has
// registered it as a waiter (its Acquire returned a Waiter), with a channel
// for its result. c must come from waiterClient.
func (s *suite) waitFor(c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) <-chan lockResult {
	s.t.Helper()
	m := s.mutex(c, name, opts...)
	res, err := startWaitingFn(c, name, func() (*dlock.Lease, error) { return m.Lock(ctx) })
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

func (s *suite) fairFIFO() {
	const waiters = 8
	name := s.name("f")
	h := s.client()
	holder := s.lock(h.Mutex(name, dlock.Fair()))
	var (
		mu    sync.Mutex
		order []int
	)
	results := make([]<-chan lockResult, waiters)
	for i := range waiters {
		results[i] = s.waitFor(s.waiterClient(), name, s.ctx(time.Minute), dlock.Fair())
	}
	var wg sync.WaitGroup
	for i, ch := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := <-ch
			if r.err != nil {
				s.t.Errorf("waiter %d: %v", i, r.err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := r.l.Unlock(context.Background()); err != nil {
				s.t.Errorf("waiter %d unlock: %v", i, err)
			}
		}()
	}
	s.unlock(holder)
	wg.Wait()
	for i, w := range order {
		if i != w {
			s.t.Fatalf("grant order %v, want arrival order 0..%d", order, waiters-1)
		}
	}
}

func (s *suite) tryLockWhileHeld() {
	name := s.name("try")
	a, b := s.client(), s.client()
	l := s.lock(s.mutex(a, name))
	ctx := s.ctx(time.Minute)
	_, err := s.mutex(b, name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		s.t.Fatalf("TryLock while held: %v, want ErrNotAcquired", err)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		s.t.Fatalf("TryLock waited for its context to end: %v", err)
	}
	var held *dlock.HeldError
	if errors.As(err, &held) && held.Holder.Owner != l.Owner() {
		s.t.Errorf("TryLock says the holder is %q, want %q", held.Holder.Owner, l.Owner())
	}
	s.unlock(l)
	l2, err := s.mutex(b, name).TryLock(ctx)
	if err != nil {
		s.t.Fatalf("TryLock after release: %v", err)
	}
	s.unlock(l2)
}

// cancelledWaiter checks that a waiter that gives up leaves nothing behind:
// a later waiter gets the lock as soon as it is released, though the holder's
// TTL (a minute) and any leftover state's timeout would make it wait long.
func (s *suite) cancelledWaiter() { s.cancelled(false) }

func (s *suite) cancelledFairWaiter() { s.cancelled(true) }

func (s *suite) cancelled(fair bool) {
	name := s.name("cw")
	var opts []dlock.Option
	if fair {
		opts = append(opts, dlock.Fair())
	}
	a, b, c := s.client(dlock.TTL(time.Minute)), s.waiterClient(), s.waiterClient()
	holder := s.lock(s.mutex(a, name, opts...))
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := s.waitFor(b, name, ctx, opts...)
	later := s.waitFor(c, name, s.ctx(time.Minute), opts...)
	cancel()
	r := <-gaveUp
	if !errors.Is(r.err, dlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		s.t.Fatalf("cancelled Lock: %v, want ErrNotAcquired and context.Canceled", r.err)
	}
	if in, ok := a.Backend().(dlock.Inspector); ok && fair {
		infos, err := in.Inspect(s.ctx(time.Minute), name)
		if err != nil {
			s.t.Fatalf("Inspect: %v", err)
		}
		for _, info := range infos {
			if info.Name == name && info.Waiters > 1 {
				s.t.Errorf("after one of two waiters gave up, Inspect shows %d waiters", info.Waiters)
			}
		}
	}
	s.unlock(holder)
	select {
	case r := <-later:
		if r.err != nil {
			s.t.Fatalf("later waiter: %v", r.err)
		}
		if r.l.Token() <= holder.Token() {
			s.t.Errorf("later waiter's token %d is not above %d", r.l.Token(), holder.Token())
		}
		s.unlock(r.l)
	case <-time.After(20 * time.Second):
		s.t.Fatalf("the waiter after a cancelled one was not granted within 20s of the release")
	}
}

// inspectWaiters checks that an Inspector reports the waiters it has, fair
// and not fair, or -1 when it cannot tell: never a count that leaves some
// out (dlock status showed 0 while two dlock run waited).
func (s *suite) inspectWaiters() {
	if _, ok := s.client().Backend().(dlock.Inspector); !ok {
		s.t.Skip("the backend is not an Inspector")
	}
	for _, fair := range []bool{false, true} {
		var opts []dlock.Option
		if fair {
			opts = append(opts, dlock.Fair())
		}
		name := s.name(fmt.Sprintf("iw-fair-%v", fair))
		a := s.client(dlock.TTL(time.Minute))
		holder := s.lock(s.mutex(a, name, opts...))
		s.checkWaiters(a, name, fair, 0)
		ctx, cancel := context.WithCancel(context.Background())
		w1 := s.waitFor(s.waiterClient(), name, ctx, opts...)
		w2 := s.waitFor(s.waiterClient(), name, ctx, opts...)
		s.checkWaiters(a, name, fair, 2)
		cancel()
		for _, w := range []<-chan lockResult{w1, w2} {
			if r := <-w; r.err == nil {
				s.unlock(r.l)
				s.t.Fatalf("fair=%v: a waiter was granted while the lock was held", fair)
			}
		}
		s.unlock(holder)
	}
}

// checkWaiters checks that Inspect reports want waiters on the held lock
// name, or -1.
func (s *suite) checkWaiters(c *dlock.Client, name string, fair bool, want int) {
	s.t.Helper()
	infos, err := c.Backend().(dlock.Inspector).Inspect(s.ctx(time.Minute), name)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	for _, in := range infos {
		if in.Name == name {
			if in.Waiters != want && in.Waiters != -1 {
				s.t.Errorf("fair=%v: Inspect shows %d waiters with %d waiting, want %d or -1 (unknown)", fair, in.Waiters, want, want)
			}
			return
		}
	}
	s.t.Fatalf("Inspect does not list the held lock %q: %+v", name, infos)
}
