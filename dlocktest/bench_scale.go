package dlocktest

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// BenchOption adjusts the scale workloads of [Bench], [BenchHeld] and
// [BenchHerd].
type BenchOption interface{ applyBench(*benchConfig) }

type benchConfig struct {
	held        []int
	heldTTL     time.Duration
	heldBudget  time.Duration
	herd        []int
	herdClients int
	store       func() int64
}

type benchOptionFunc func(*benchConfig)

func (f benchOptionFunc) applyBench(c *benchConfig) { f(c) }

func newBenchConfig(opts []BenchOption) benchConfig {
	c := benchConfig{
		held:        []int{10_000, 100_000},
		heldTTL:     3 * time.Second,
		heldBudget:  3 * time.Minute,
		herd:        []int{10, 100, 1000},
		herdClients: 10,
	}
	if ttl, err := time.ParseDuration(os.Getenv("DLOCK_BENCH_HELD_TTL")); err == nil && ttl > 0 {
		c.heldTTL = ttl
	}
	for _, o := range opts {
		o.applyBench(&c)
	}
	return c
}

// HeldSizes sets the numbers of leases the Held workload holds at once,
// one sub-benchmark each; the default is 10,000 and 100,000.
func HeldSizes(n ...int) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.held = n })
}

// HeldTTL sets the TTL of the Held workload's leases (default 3 s, or the
// Go duration in the environment variable DLOCK_BENCH_HELD_TTL). The
// leases are held for four renewal periods (4·TTL/3) once all are taken.
func HeldTTL(d time.Duration) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.heldTTL = d })
}

// HeldBudget bounds the time the Held workload spends taking its leases
// (default 3 minutes); a size that takes longer is skipped, with the rate
// it reached, rather than measured.
func HeldBudget(d time.Duration) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.heldBudget = d })
}

// HerdSizes sets the numbers of waiters of the Herd workload, one
// sub-benchmark each; the default is 10, 100 and 1,000.
func HerdSizes(n ...int) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.herd = n })
}

// HerdClients sets how many Clients (each with a backend of its own) share
// the Herd workload's waiters; the default is 10.
func HerdClients(n int) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.herdClients = n })
}

// StoreRequests gives the scale workloads a count of the requests that
// reached the store so far (commands, statements, RPCs: counted by the
// caller in its driver, for every backend the factory makes); they then
// report it beside their own count of backend calls.
func StoreRequests(count func() int64) BenchOption {
	return benchOptionFunc(func(c *benchConfig) { c.store = count })
}

// BenchHeld runs the Held workload for each size n (see [HeldSizes]): one
// Client takes n leases on distinct names (64 Locks at a time), holds
// them for four renewal periods, and releases them. It reports
//
//   - B/lease: the heap in use after a GC while holding, less that before
//     the Client was made, per lease (the Client's, its backend's and this
//     workload's few bytes per lease);
//   - goroutines-before and goroutines: the process's goroutines before
//     the Client was made and the most seen while holding;
//   - renew-calls/s and renew-items/s: renewal calls (Renew, RenewBatch)
//     and the leases they carried, per second of holding, counted at the
//     backend boundary; renewals/lease, the renewals per lease while held;
//   - store-req/s: the requests the store saw per second of holding, when
//     [StoreRequests] is given;
//   - lost: the leases that ended before their release (the goal is
//     none), and lost-taking, those of them that ended while the others
//     were being taken;
//   - acquire-s: the seconds taking the leases took (a Lock that fails
//     with ErrBackendUnavailable is retried up to 3 times: lock-retries);
//     renew-errs, the
//     renewals that failed, and renew-max-s, the longest renewal call.
//
// Run it once per size: -benchtime 1x. It ignores b.N.
func BenchHeld(b *testing.B, newBackend Factory, opts ...BenchOption) {
	cfg := newBenchConfig(opts)
	for _, n := range cfg.held {
		b.Run(strconv.Itoa(n), func(b *testing.B) { held(b, newBackend, cfg, n) })
	}
}

func held(b *testing.B, newBackend Factory, cfg benchConfig, n int) {
	heap0, gor0 := heapInUse(), runtime.NumGoroutine()
	cnt := new(calls)
	c, err := dlock.New(counted(newBackend(b), cnt), dlock.TTL(cfg.heldTTL))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prefix := "dlockbench/" + randHex(6) + "/h/"
	leases := make([]*dlock.Lease, n)
	defer func() {
		// Release what is held in parallel; Close would do it one by one.
		parallel(n, func(i int) {
			if leases[i] != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				leases[i].Unlock(ctx)
				cancel()
			}
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.heldBudget)
	start := time.Now()
	var took, retries atomic.Int64
	var firstErr error
	var errOnce sync.Once
	parallel(n, func(i int) {
		if ctx.Err() != nil {
			return
		}
		m := c.Mutex(prefix + strconv.Itoa(i))
		l, err := m.Lock(ctx)
		// A store that did not answer in time, as any caller would,
		// is asked again (a few times): the workload is about holding.
		for try := 0; try < 3 && errors.Is(err, dlock.ErrBackendUnavailable) && ctx.Err() == nil; try++ {
			retries.Add(1)
			l, err = m.Lock(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				errOnce.Do(func() { firstErr = err })
				cancel()
			}
			return
		}
		leases[i] = l
		took.Add(1)
	})
	over := ctx.Err() != nil
	cancel()
	acquire := time.Since(start)
	if firstErr != nil {
		b.Fatalf("Lock %d of %d: %v", took.Load()+1, n, firstErr)
	}
	if over {
		b.Skipf("took %d of %d leases in %v (%.0f/s): too slow for this size, skipped", took.Load(), n, acquire.Round(time.Second), float64(took.Load())/acquire.Seconds())
	}
	lostTaking := 0
	for _, l := range leases {
		if l.Err() != nil {
			lostTaking++
		}
	}

	// Hold for four renewal periods, watching the goroutines.
	hold := 4 * cfg.heldTTL / 3
	s0, st0 := cnt.snapshot(), storeCount(cfg)
	holdStart := time.Now()
	gor := runtime.NumGoroutine()
	tick := time.NewTicker(50 * time.Millisecond)
	for time.Since(holdStart) < hold {
		<-tick.C
		gor = max(gor, runtime.NumGoroutine())
	}
	tick.Stop()
	el := time.Since(holdStart)
	d, st := cnt.snapshot().sub(s0), storeCount(cfg)-st0
	heap := heapInUse()
	lost := 0
	var lostErr error
	for _, l := range leases {
		if err := l.Err(); err != nil {
			lost++
			lostErr = err
		}
	}
	runtime.KeepAlive(leases)
	b.ReportMetric(float64(int64(heap)-int64(heap0))/float64(n), "B/lease")
	b.ReportMetric(float64(gor0), "goroutines-before")
	b.ReportMetric(float64(gor), "goroutines")
	b.ReportMetric(float64(d.renewals())/el.Seconds(), "renew-calls/s")
	b.ReportMetric(float64(d.renewItems)/el.Seconds(), "renew-items/s")
	b.ReportMetric(float64(d.renewItems)/float64(n), "renewals/lease")
	if cfg.store != nil {
		b.ReportMetric(float64(st)/el.Seconds(), "store-req/s")
	}
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(lostTaking), "lost-taking")
	b.ReportMetric(acquire.Seconds(), "acquire-s")
	b.ReportMetric(float64(retries.Load()), "lock-retries")
	b.ReportMetric(float64(cnt.renewErrs.Load()), "renew-errs")
	b.ReportMetric(time.Duration(cnt.renewMax.Load()).Seconds(), "renew-max-s")
	if lost > 0 {
		// A failed benchmark prints no metrics: say the main ones here.
		b.Errorf("%d of %d leases lost, %d of them while taking the others (TTL %v; taking them took %v; %d renewals failed, %d of them cut off by their context's deadline; the longest renewal call took %v; %.0f B/lease, %d goroutines, %.1f renew-calls/s, %.0f renew-items/s, %.0f store-req/s), e.g.: %v",
			lost, n, lostTaking, cfg.heldTTL, acquire.Round(time.Millisecond), cnt.renewErrs.Load(), cnt.renewCut.Load(), time.Duration(cnt.renewMax.Load()).Round(time.Millisecond),
			float64(int64(heap)-int64(heap0))/float64(n), gor, float64(d.renewals())/el.Seconds(), float64(d.renewItems)/el.Seconds(), float64(st)/el.Seconds(), lostErr)
	}
}

// BenchHerd runs the Herd workload for each number of waiters w (see
// [HerdSizes]), with the Client options opts (Fair or not): w goroutines,
// spread over several Clients (see [HerdClients]), lock one name in a loop:
// lock, unlock, and, once a waiter has the lock, lock again; so at every
// release w-1 wait, and every grant is a hand-off to a waiter. The first
// release comes once all w are registered with the store, and b.N grants
// are measured. It reports
//
//   - calls/release: backend calls (Acquire, Waiter.Acquire, Release,
//     Cancel, renewals) per release, the releaser's own next Acquire
//     included; the goal is O(1), not O(w);
//   - wakes/release: Waiter.Wait returns per release;
//   - store-req/release: the requests the store saw per release, when
//     [StoreRequests] is given;
//   - handoff-p50-µs and handoff-p99-µs: from the start of a release to
//     the next grant.
func BenchHerd(b *testing.B, newBackend Factory, opts []dlock.Option, bopts ...BenchOption) {
	cfg := newBenchConfig(bopts)
	for _, w := range cfg.herd {
		b.Run(strconv.Itoa(w), func(b *testing.B) { herd(b, newBackend, opts, cfg, w) })
	}
}

func herd(b *testing.B, newBackend Factory, opts []dlock.Option, cfg benchConfig, w int) {
	cnt := new(calls)
	clients := make([]*dlock.Client, max(1, min(cfg.herdClients, w)))
	for i := range clients {
		c, err := dlock.New(counted(newBackend(b), cnt), opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	name := "dlockbench/" + randHex(6) + "/herd"
	bg := context.Background()
	gate, err := clients[0].Mutex(name).Lock(bg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var (
		mu          sync.Mutex // guards what follows
		grants      int
		lastRelease time.Time
		turn        = make(chan struct{}) // closed at the next grant
		handoffs    = make([]time.Duration, 0, b.N)
		end         snapshot
		endStore    int64
		wg          sync.WaitGroup
	)
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := clients[g%len(clients)].Mutex(name)
			for {
				l, err := m.Lock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
						cancel()
					}
					return
				}
				got := time.Now()
				mu.Lock()
				grants++
				measured := grants <= b.N
				if measured {
					handoffs = append(handoffs, got.Sub(lastRelease))
				}
				close(turn)
				turn = make(chan struct{})
				next := turn
				if grants == b.N {
					end, endStore = cnt.snapshot(), storeCount(cfg)
				}
				lastRelease = time.Now()
				mu.Unlock()
				uctx, ucancel := context.WithTimeout(bg, time.Minute)
				err = l.Unlock(uctx)
				ucancel()
				if err != nil {
					b.Error(err)
				}
				if !measured || err != nil {
					cancel()
					return
				}
				// Wait again only once a waiter has the lock, so that
				// every grant is a hand-off to a waiter, not the
				// releaser's own next Lock.
				select {
				case <-next:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	// Wait until every goroutine waits in the store.
	wait := time.Minute + time.Duration(w)*50*time.Millisecond
	deadline := time.Now().Add(wait)
	for cnt.waiting.Load() < int64(w) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			n := cnt.waiting.Load()
			cancel()
			gate.Unlock(bg)
			wg.Wait()
			if !b.Failed() {
				b.Fatalf("%d of %d waiters registered after %v", n, w, wait)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	mu.Lock()
	s0, st0 := cnt.snapshot(), storeCount(cfg)
	lastRelease = time.Now()
	mu.Unlock()
	if err := gate.Unlock(bg); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	b.StopTimer()
	if b.Failed() {
		return
	}
	d := end.sub(s0)
	rel := float64(b.N)
	b.ReportMetric(float64(d.requests())/rel, "calls/release")
	b.ReportMetric(float64(d.wakes)/rel, "wakes/release")
	if cfg.store != nil {
		b.ReportMetric(float64(endStore-st0)/rel, "store-req/release")
	}
	reportLatency(b, "handoff-", handoffs)
}

func storeCount(cfg benchConfig) int64 {
	if cfg.store == nil {
		return 0
	}
	return cfg.store()
}

// heapInUse returns the bytes in in-use heap spans after a GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// parallel calls f(i) for every i in [0, n), 64 at a time.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				f(int(i))
			}
		}()
	}
	wg.Wait()
}
