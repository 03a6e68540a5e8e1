package dlocktest

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/workload"
)

// Semaphorer is the least a library must offer to run the semaphore
// workload: a blocking acquisition of one permit of the semaphore called
// name with the given limit, which returns its release. Adapt another
// library to it to run the same workload on it with [BenchSemaphores].
type Semaphorer interface {
	Acquire(ctx context.Context, name string, limit int) (release func(context.Context) error, err error)
}

// RWLocker is the least a library must offer to run the read-write
// workload: a blocking read lock and a blocking write lock by name, each
// returning its unlock. Adapt another library to it to run the same
// workload on it with [BenchRWLockers].
type RWLocker interface {
	RLock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	Lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
}

// BenchWeighted runs the workloads of the weighted kinds on dlock Clients
// over backends made by newBackend, one Client (one backend) per
// contender, as sub-benchmarks Semaphore4x16 ([BenchSemaphores]) and RW90
// ([BenchRWLockers]). A backend that cannot keep a semaphore or a
// read-write lock (see [dlock.Granter]) skips them. With [StoreRequests]
// they also report store-req/grant, the requests the store saw per grant.
// [Bench] runs it; the Client options of Bench do not matter here, as
// every waiter of a weighted kind waits in arrival order.
func BenchWeighted(b *testing.B, newBackend Factory, bopts ...BenchOption) {
	requests := newBenchConfig(bopts).Requests
	newClient := func(b *testing.B) *dlock.Client {
		c, err := dlock.New(newBackend(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	benchSemaphores(b, func(b *testing.B) Semaphorer { return workload.ClientSemaphorer(newClient(b)) }, requests)
	benchRWLockers(b, func(b *testing.B) RWLocker { return workload.ClientRWLocker(newClient(b)) }, requests)
}

// BenchSemaphores runs, as sub-benchmark Semaphore4x16, 16 contenders,
// each a semaphorer made by newSemaphorer (each stands for a process of
// its own), on one semaphore of 4 permits, each doing [ContendedWork]
// while it holds a permit, for b.N grants. It reports grants/s, a
// waiter's wait p50/p99 (wait-p50-µs, wait-p99-µs: from the call to the
// grant), held-max (the most permits seen held at once; more than 4 fails
// the benchmark) and Jain's fairness index over the contenders' grants;
// with [StoreRequests] in bopts, store-req/grant too.
func BenchSemaphores(b *testing.B, newSemaphorer func(b *testing.B) Semaphorer, bopts ...BenchOption) {
	benchSemaphores(b, newSemaphorer, newBenchConfig(bopts).Requests)
}

// BenchRWLockers runs, as sub-benchmark RW90, 16 contenders, each a
// locker made by newRWLocker (each stands for a process of its own), on
// one read-write lock, each doing [ContendedWork] while it holds it, for
// b.N grants; one operation in ten of each contender is a write (the
// contenders' writes staggered), the others reads. It reports grants/s,
// writes/s, a writer's wait p50/p99 (write-wait-p50-µs,
// write-wait-p99-µs), a reader's (read-wait-…) and readers-max, the most
// readers seen holding at once; a writer seen beside another holder fails
// the benchmark. With [StoreRequests] in bopts, it reports store-req/grant
// too.
func BenchRWLockers(b *testing.B, newRWLocker func(b *testing.B) RWLocker, bopts ...BenchOption) {
	benchRWLockers(b, newRWLocker, newBenchConfig(bopts).Requests)
}

func benchSemaphores(b *testing.B, newSemaphorer func(b *testing.B) Semaphorer, requests func() int64) {
	b.Run("Semaphore4x16", func(b *testing.B) {
		sems := make([]workload.Semaphorer, workload.WeightedContenders)
		for i := range sems {
			sems[i] = newSemaphorer(b)
		}
		name := "dlockbench/" + randHex(6) + "/semaphore"
		weightedReport(b, requests, func(sp *workload.Span) (workload.Result, error) {
			return workload.SemaphoreContended(context.Background(), sems, name, workload.SemaphoreLimit, ContendedWork, sp)
		})
	})
}

func benchRWLockers(b *testing.B, newRWLocker func(b *testing.B) RWLocker, requests func() int64) {
	b.Run("RW90", func(b *testing.B) {
		rws := make([]workload.RWLocker, workload.WeightedContenders)
		for i := range rws {
			rws[i] = newRWLocker(b)
		}
		name := "dlockbench/" + randHex(6) + "/rw"
		weightedReport(b, requests, func(sp *workload.Span) (workload.Result, error) {
			return workload.RWContended(context.Background(), rws, name, workload.RWWriteEvery, ContendedWork, sp)
		})
	})
}

// weightedReport runs a weighted workload for b.N grants and reports it,
// with store-req/grant if requests is set; a backend that cannot keep the
// kind skips it.
func weightedReport(b *testing.B, requests func() int64, run func(sp *workload.Span) (workload.Result, error)) {
	var st0 int64
	sp := workload.OpsSpan(b.N, func() {
		b.ResetTimer()
		if requests != nil {
			st0 = requests()
		}
	})
	r, err := run(sp)
	b.StopTimer()
	if err == nil && requests != nil && r.Ops > 0 {
		b.ReportMetric(float64(requests()-st0)/float64(r.Ops), "store-req/grant")
	}
	report(b)(r, err)
}
