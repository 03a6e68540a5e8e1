package redlock_test

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestHeldMany: one Client holding thousands of leases on 5 masters keeps
// all of them for three renewal periods, renews them in batches (a few
// script calls per master per pass, not one per lease) and with a number
// of goroutines that does not grow with the leases.
func TestHeldMany(t *testing.T) {
	if testing.Short() {
		t.Skip("holds thousands of leases")
	}
	g := testserver.RedisN(t, 5)
	const leases, ttl = 4000, 3 * time.Second
	c, err := dlock.New(open(t, g, ""), dlock.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 5*time.Minute)
	held := make([]*dlock.Lease, leases)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < leases; i = next.Add(1) - 1 {
				l, err := c.Mutex("held/" + strconv.Itoa(int(i))).Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Lock: %v", err)
	}
	for _, s := range g.Nodes() {
		if _, err := s.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	gor := maxGoroutines(3 * ttl) // three renewal periods
	lost := 0
	var lostErr error
	for _, l := range held {
		if err := l.Err(); err != nil {
			lost++
			lostErr = err
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d leases lost while held, e.g.: %v", lost, leases, lostErr)
	}
	// At least 9 renewals per lease (every TTL/3 for 3 TTLs): one script
	// call per lease would be 9·leases.
	for i, s := range g.Nodes() {
		if n := scriptCalls(t, s); n >= leases {
			t.Errorf("master %d ran %d script calls while %d leases were held for %v (TTL %v), want a few per renewal pass", i, n, leases, 3*ttl, ttl)
		}
	}
	if gor >= leases/10 {
		t.Errorf("%d goroutines while holding %d leases, want a number that does not grow with the leases", gor, leases)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil && lost == 0 {
			t.Error(err)
		}
	}
}

// maxGoroutines returns the most goroutines seen over d, sampled often.
func maxGoroutines(d time.Duration) int {
	n := runtime.NumGoroutine()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); {
		<-tick.C
		n = max(n, runtime.NumGoroutine())
	}
	return n
}
