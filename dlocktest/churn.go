package dlocktest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock"
)

// Churn locks and releases n distinct names, prefix followed by 0 to n-1,
// on c, 32 at a time, with opts on every Mutex; and with dlock.Fair added
// on every fourth name if fair is set. It is the load of a backend's
// measured-state test (issue 13): afterwards the store should keep no
// state for any of the names.
func Churn(t testing.TB, ctx context.Context, c *dlock.Client, prefix string, n int, fair bool, opts ...dlock.Option) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				o := opts
				if fair && i%4 == 0 {
					o = append(o[:len(o):len(o)], dlock.Fair())
				}
				l, err := c.Mutex(prefix+strconv.FormatInt(i, 10), o...).Lock(ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("churn of %d names under %q: %v", n, prefix, err)
	}
}
