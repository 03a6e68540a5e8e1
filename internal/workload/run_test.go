package workload

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// TestRunWorkload runs every workload for a short time on mem: each gives
// its Result with operations and its figures, the requests are counted,
// and nothing is left behind.
func TestRunWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workloads for seconds")
	}
	ms := mem.NewStore()
	var req atomic.Int64
	s := Store{
		NewBackend: func(context.Context) (dlock.Backend, error) { return ms.Backend(), nil },
		Options:    []dlock.Option{dlock.Fair()},
		Requests:   func() int64 { return req.Add(3) }, // the count moves by 3 between two reads
	}
	wc := WorkloadConfig{Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, HerdSizes: []int{3, 4}, HeldSizes: []int{50}, HeldTTL: 600 * time.Millisecond}
	want := map[string][]string{
		"uncontended": {"uncontended"},
		"distinct":    {"distinct"},
		"contended8":  {"contended8"},
		// Weighted kinds through the counting wrapper (it must pass
		// CanGrant on) and the Client's Semaphore and RWMutex.
		"semaphore4x16": {"semaphore4x16"},
		"rw90":          {"rw90"},
		"herd":          {"herd3", "herd4"},
		"herd7":         {"herd7"},
		"held":          {"held50"},
	}
	ctx := context.Background()
	for name, results := range want {
		var phases []string
		rs, err := RunWorkload(ctx, s, name, wc, func(p string) { phases = append(phases, p) })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rs) != len(results) || len(phases) == 0 {
			t.Fatalf("%s: %d results, progress %q; want %v", name, len(rs), phases, results)
		}
		for i, r := range rs {
			if r.Workload != results[i] || r.Ops <= 0 || r.Elapsed <= 0 || len(r.Metrics) == 0 {
				t.Errorf("%s: result %+v; want workload %s with operations and figures", name, r, results[i])
			}
			if strings.HasPrefix(name, "herd") || name == "held" {
				continue
			}
			// Lock and unlock are two calls at least; the store count
			// moved by 3 per read, so by 3 over the run.
			if c := metric(r, "calls/op"); c < 2 {
				t.Errorf("%s: %v calls/op; want >= 2", name, c)
			}
			if st := metric(r, "store-req/op"); st != 3/float64(r.Ops) {
				t.Errorf("%s: %v store-req/op; want 3/%d", name, st, r.Ops)
			}
		}
	}
	if infos, err := ms.Backend().Inspect(ctx, ""); err != nil || len(infos) != 0 {
		t.Errorf("left behind: %v, %v", infos, err)
	}
}

// TestRunWorkloadUnknown: a workload name that does not exist is refused,
// naming it and the known ones, before anything runs.
func TestRunWorkloadUnknown(t *testing.T) {
	s := Store{NewBackend: func(context.Context) (dlock.Backend, error) {
		t.Error("a backend was opened for an unknown workload")
		return nil, errors.New("not to be called")
	}}
	for _, name := range []string{"contendid", "herd0", "held-1", "herdx", ""} {
		_, err := RunWorkload(context.Background(), s, name, WorkloadConfig{}, nil)
		if !errors.Is(err, ErrUnknownWorkload) || !strings.Contains(err.Error(), "uncontended") {
			t.Errorf("%q: %v; want ErrUnknownWorkload listing the workloads", name, err)
		}
		if err := CheckWorkloads([]string{"held", name}); !errors.Is(err, ErrUnknownWorkload) {
			t.Errorf("CheckWorkloads(%q): %v; want ErrUnknownWorkload", name, err)
		}
	}
}

// TestWeightedWorkloadsCatchOverlap: the semaphore and read-write
// workloads fail, naming the lock, when their library lets more holders in
// than it should.
func TestWeightedWorkloadsCatchOverlap(t *testing.T) {
	ctx := context.Background()
	sems := make([]Semaphorer, WeightedContenders)
	rws := make([]RWLocker, WeightedContenders)
	for i := range sems {
		sems[i], rws[i] = noLock{}, noLock{}
	}
	// 100 ms of work per grant: 16 contenders overlap at once.
	_, err := SemaphoreContended(ctx, sems, "s", SemaphoreLimit, 100*time.Millisecond, OpsSpan(2*WeightedContenders, nil))
	if err == nil || !strings.Contains(err.Error(), `semaphore "s" of 4`) {
		t.Errorf("semaphore granting everyone: %v; want an error naming it", err)
	}
	_, err = RWContended(ctx, rws, "rw", 2, 100*time.Millisecond, OpsSpan(2*WeightedContenders, nil))
	if err == nil || !strings.Contains(err.Error(), `read-write lock "rw"`) {
		t.Errorf("read-write lock letting writers in beside others: %v; want an error naming it", err)
	}
	r, err := SemaphoreContended(ctx, sems[:SemaphoreLimit], "s4", SemaphoreLimit, time.Millisecond, OpsSpan(20, nil))
	if err != nil || r.Ops != 20 || metric(r, "held-max") > SemaphoreLimit {
		t.Errorf("as many contenders as permits: %+v, %v; want 20 grants and no error", r, err)
	}
}

// noLock grants every request at once: a broken lock.
type noLock struct{}

func nop(context.Context) error { return nil }

func (noLock) Acquire(context.Context, string, int) (func(context.Context) error, error) {
	return nop, nil
}
func (noLock) RLock(context.Context, string) (func(context.Context) error, error) { return nop, nil }
func (noLock) Lock(context.Context, string) (func(context.Context) error, error)  { return nop, nil }
