package sqllocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
)

// CountFunc returns the number of lease and waiter rows whose names start
// with prefix (see [Count]).
type CountFunc func(ctx context.Context, prefix string) (int, error)

// Bounded checks that a lease table keeps no row for free names: n
// distinct names locked and released (16 at a time) leave no row; n
// names granted to a holder that then vanished without releasing (its
// Backend closed, as if its process was killed) leave no row once their
// TTL has run out and the documented number of operations — SweepEvery
// plus one per SweepBatch expired rows — has been made by another
// Backend. open returns a new Backend in lease mode on the table.
func Bounded(t *testing.T, open func(t testing.TB) dlock.Backend, count CountFunc, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := client(t, open(t))
	defer c.Close()
	parallel(t, n, func(i int) error {
		l, err := c.Mutex(fmt.Sprintf("bounded/released/%d", i)).TryLock(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	})
	expectRows(t, ctx, count, "bounded/released/", 0, fmt.Sprintf("after %d names were locked and released", n))

	const ttl = 300 * time.Millisecond
	dead := open(t)
	parallel(t, n, func(i int) error {
		_, _, err := dead.Acquire(ctx, dlock.Request{Name: fmt.Sprintf("bounded/dead/%d", i), Owner: "killed-holder", TTL: ttl})
		return err
	})
	dead.Close() // the holder vanishes without releasing
	time.Sleep(2 * ttl)
	// The documented bound: the next operations of any engine reclaim
	// the expired rows, SweepBatch per operation once a sweep finds a
	// full batch.
	ops := sqllock.SweepEvery + n/sqllock.SweepBatch + 1
	for i := range (ops + 1) / 2 {
		l, err := c.Mutex(fmt.Sprintf("bounded/op/%d", i)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expectRows(t, ctx, count, "bounded/", 0, fmt.Sprintf("after %d names were held by a killed holder, expired, and %d operations followed", n, ops))
}

func expectRows(t *testing.T, ctx context.Context, count CountFunc, prefix string, want int, what string) {
	t.Helper()
	got, err := count(ctx, prefix)
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	if got > want {
		t.Errorf("%s, the tables hold %d rows under %q; want at most %d", what, got, prefix, want)
	}
}

// parallel runs fn(0..n-1) on 16 goroutines and fails t on the first
// error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%d: %w", i, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Churn runs holders on procs Backends that open returns (each standing
// for a process: its own pool, its own in-process state), 4 goroutines each,
// locking and releasing names — one name, and 40 names — while another
// goroutine calls reclaim again and again: no two holders of a name may
// overlap, and each grant of a name must have a greater token than the
// one before. Half the holders queue fairly (waiter rows).
func Churn(t *testing.T, open func(t testing.TB) dlock.Backend, procs int, reclaim func(context.Context) (int, error)) {
	for _, names := range []int{1, 40} {
		t.Run(fmt.Sprintf("names=%d", names), func(t *testing.T) {
			backends := make([]dlock.Backend, procs)
			for i := range backends {
				backends[i] = open(t)
			}
			churn(t, backends, reclaim, names)
		})
	}
}

func churn(t *testing.T, backends []dlock.Backend, reclaim func(context.Context) (int, error), names int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu     sync.Mutex
		last   = make(map[string]uint64)
		holder = make([]atomic.Int32, names)
		wg     sync.WaitGroup
		fails  atomic.Int32
	)
	stop := make(chan struct{})
	reclaimed := make(chan struct{})
	go func() {
		defer close(reclaimed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := reclaim(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("reclaim: %v", err)
				return
			}
		}
	}()
	const rounds = 30
	for bi, b := range backends {
		c := client(t, b)
		defer c.Close()
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var opts []dlock.Option
				if g%2 == 1 {
					opts = append(opts, dlock.Fair())
				}
				for r := range rounds {
					i := (bi*7 + g*3 + r) % names
					name := fmt.Sprintf("churn/%d/%d", names, i)
					l, err := c.Mutex(name, append(opts, dlock.TTL(10*time.Second))...).Lock(ctx)
					if err != nil {
						t.Errorf("Lock %s: %v", name, err)
						fails.Add(1)
						return
					}
					if !holder[i].CompareAndSwap(0, 1) {
						t.Errorf("%s: granted to two holders at once (token %d)", name, l.Token())
					}
					mu.Lock()
					if l.Token() <= last[name] {
						t.Errorf("%s: token %d after %d", name, l.Token(), last[name])
					}
					last[name] = l.Token()
					mu.Unlock()
					holder[i].Store(0)
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("Unlock %s: %v", name, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-reclaimed
}
