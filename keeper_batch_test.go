package dlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// slowBatch is a batching backend whose RenewBatch takes perItem for each
// renewal, as a store does for a large pipeline, and gives up when its
// context ends.
type slowBatch struct {
	dlock.Backend
	perItem time.Duration
	largest atomic.Int64
	calls   atomic.Int64
}

func (s *slowBatch) RenewBatch(ctx context.Context, rs []dlock.Renewal) []error {
	s.calls.Add(1)
	for {
		m := s.largest.Load()
		if int64(len(rs)) <= m || s.largest.CompareAndSwap(m, int64(len(rs))) {
			break
		}
	}
	t := time.NewTimer(time.Duration(len(rs)) * s.perItem)
	defer t.Stop()
	select {
	case <-t.C:
		return s.Backend.(dlock.BatchRenewer).RenewBatch(ctx, rs)
	case <-ctx.Done():
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = fmt.Errorf("%w: %v", dlock.ErrBackendUnavailable, ctx.Err())
		}
		return errs
	}
}

// TestManyLeasesRenewInBoundedBatches: 5,000 leases whose one batch call
// would take longer than the leases have left are renewed in calls of at
// most 1,024 by deadline, and none is lost. With one call for all (as
// before), the call was cut off by the earliest deadline every time and
// every lease was lost.
func TestManyLeasesRenewInBoundedBatches(t *testing.T) {
	const n = 5000
	b := &slowBatch{Backend: mem.New(), perItem: 200 * time.Microsecond} // 1 s for all
	c := newClient(t, b, dlock.TTL(900*time.Millisecond))
	ctx := context.Background()
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex(fmt.Sprintf("many/%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	time.Sleep(1200 * time.Millisecond) // four renewal periods
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d leases lost; largest batch %d, %d calls", lost, n, b.largest.Load(), b.calls.Load())
	}
	if got := b.largest.Load(); got > 1024 {
		t.Errorf("a renewal call carried %d leases, want at most 1024", got)
	}
	if b.calls.Load() == 0 {
		t.Error("no batched renewal was made")
	}
	t.Logf("%d calls, largest %d leases", b.calls.Load(), b.largest.Load())
}
