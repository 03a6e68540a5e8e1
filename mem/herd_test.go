package mem_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// attempts counts the waiters' attempts on a backend.
type attempts struct {
	dlock.Backend
	n *atomic.Int64
}

func (a attempts) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, dlock.Waiter, error) {
	g, w, err := a.Backend.Acquire(ctx, req)
	if w != nil {
		w = attemptsWaiter{w, a.n}
	}
	return g, w, err
}

type attemptsWaiter struct {
	dlock.Waiter
	n *atomic.Int64
}

func (w attemptsWaiter) Acquire(ctx context.Context) (dlock.Grant, error) {
	w.n.Add(1)
	return w.Waiter.Acquire(ctx)
}

// TestHerdWakesOne: a release wakes one waiter, not all of them: with 200
// waiters on one name (fair or not), the waiters' attempts per grant stay
// a small constant instead of growing with the number waiting.
func TestHerdWakesOne(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			const waiters = 200
			s := mem.NewStore()
			var n atomic.Int64
			c, err := dlock.New(attempts{s.Backend(), &n}, dlock.TTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var opts []dlock.Option
			if fair {
				opts = append(opts, dlock.Fair())
			}
			m := c.Mutex("herd", opts...)
			first, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var granted atomic.Int64
			for range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					granted.Add(1)
					l.Unlock(ctx)
				}()
			}
			for {
				infos, err := s.Backend().Inspect(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(infos) == 1 && infos[0].Waiters == waiters {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			n.Store(0)
			first.Unlock(ctx)
			wg.Wait()
			per := float64(n.Load()) / float64(granted.Load())
			t.Logf("%d waiters: %d attempts for %d grants (%.2f per grant)", waiters, n.Load(), granted.Load(), per)
			if per > 3 {
				t.Errorf("%.2f attempts per grant with %d waiting: the release wakes a herd", per, waiters)
			}
		})
	}
}
