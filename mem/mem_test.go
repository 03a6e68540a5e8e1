package mem_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/mem"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	s := mem.NewStore()
	dlocktest.Run(t, func(testing.TB) dlock.Backend { return s.Backend() },
		dlocktest.Reclaim(nil, func(_ context.Context, prefix string) (int, error) { return s.Count(prefix), nil }))
}

// TestReclaimScale: 10,000 names locked and released leave no state; holds
// that are never released nor renewed (their owner died) are forgotten by
// later operations once expired, and fair waiters that gave up leave
// nothing.
func TestReclaimScale(t *testing.T) {
	s := mem.NewStore()
	c, err := dlock.New(s.Backend())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1250 {
				l, err := c.Mutex(fmt.Sprintf("scale/%d/%d", g, i)).Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := s.Count(""); n != 0 {
		t.Fatalf("after 10,000 names were locked and released the store keeps %d names", n)
	}

	b := s.Backend()
	const ttl = 500 * time.Millisecond
	for i := range 1000 {
		if _, _, err := b.Acquire(ctx, dlock.Request{Name: fmt.Sprintf("dead/%d", i), Owner: "dead", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	// A fair waiter that gives up behind a dead holder.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = c.Mutex("dead/0", dlock.Fair()).Lock(wctx)
	cancel()
	if err == nil {
		t.Fatal("granted while held")
	}
	if n := s.Count(""); n != 1000 {
		t.Fatalf("%d names kept while 1000 are held (or expired, not yet swept)", n)
	}
	time.Sleep(ttl)
	// Every operation sweeps up to 16 expired holds: 1000/16 operations
	// on other names forget them all.
	for i := range 1000/16 + 1 {
		l, err := c.Mutex(fmt.Sprintf("live/%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Count(""); n != 0 {
		t.Fatalf("after the holds expired and 63 operations ran, the store keeps %d names", n)
	}
	// Tokens of a forgotten name keep increasing.
	l, err := c.Mutex("dead/5").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if l.Token() <= 1000 {
		t.Errorf("token %d after the name's earlier hold", l.Token())
	}
}

func BenchmarkMem(b *testing.B) {
	s := mem.NewStore()
	dlocktest.Bench(b, func(testing.TB) dlock.Backend { return s.Backend() })
}
