package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// heldRun is one run of the Held workload (see dlocktest.BenchHeld for what it reports).
type heldRun struct {
	cfg        Config
	ttl        time.Duration
	cnt        *calls
	leases     []*dlock.Lease
	heap0      uint64
	heapTenth  uint64 // heap in use once a tenth of the leases were taken
	gor0       int
	acquire    time.Duration // taking the leases took
	retries    atomic.Int64  // Locks asked again after ErrBackendUnavailable
	lostTaking int           // leases that ended while the others were taken
}

// Held takes n leases with one Client, holds them for four renewal
// periods and releases them. A lease lost is an error, returned with the
// Result.
func Held(newBackend BackendFunc, cfg Config, n int) (Result, error) {
	h := &heldRun{cfg: cfg, ttl: cfg.HeldTTLFor(n), cnt: new(calls), leases: make([]*dlock.Lease, n)}
	h.heap0, h.gor0 = heapInUse(), runtime.NumGoroutine()
	be, err := newBackend()
	if err != nil {
		return Result{}, err
	}
	c, err := dlock.New(counted(be, h.cnt), dlock.TTL(h.ttl))
	if err != nil {
		be.Close()
		return Result{}, err
	}
	defer c.Close()
	defer h.releaseAll()
	if err := h.take(c, namePrefix()+"h/"); err != nil {
		return Result{}, err
	}
	return h.hold()
}

// releaseAll releases what is held, in parallel; Close would do it one by
// one.
func (h *heldRun) releaseAll() {
	parallel(len(h.leases), func(i int) {
		if h.leases[i] != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			h.leases[i].Unlock(ctx)
			cancel()
		}
	})
}

// take locks every lease, 64 at a time, within the budget. It measures
// the heap once a tenth of them are taken (the time that takes is not
// counted), so that hold can tell the cost of a lease from what the
// Client and its connections cost whatever the number of leases.
func (h *heldRun) take(c *dlock.Client, prefix string) error {
	n := len(h.leases)
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.HeldBudget)
	defer cancel()
	start := time.Now()
	var took atomic.Int64
	var failed atomic.Pointer[error]
	lock := func(i int) {
		if ctx.Err() != nil {
			return
		}
		m := c.Mutex(prefix + strconv.Itoa(i))
		l, err := m.Lock(ctx)
		// A store that did not answer in time, as any caller would,
		// is asked again (a few times): the workload is about holding.
		for try := 0; try < 3 && errors.Is(err, dlock.ErrBackendUnavailable) && ctx.Err() == nil; try++ {
			h.retries.Add(1)
			l, err = m.Lock(ctx)
		}
		if err != nil {
			if ctx.Err() == nil && failed.CompareAndSwap(nil, &err) {
				cancel()
			}
			return
		}
		h.leases[i] = l
		took.Add(1)
	}
	tenth := n / 10
	parallel(tenth, lock)
	measured := time.Now()
	h.heapTenth = heapInUse()
	start = start.Add(time.Since(measured))
	parallel(n-tenth, func(i int) { lock(tenth + i) })
	h.acquire = time.Since(start)
	if err := failed.Load(); err != nil {
		return fmt.Errorf("Lock %d of %d: %w", took.Load()+1, n, *err)
	}
	if took.Load() < int64(n) {
		return fmt.Errorf("took %d of %d leases in %v (%.0f/s): %w", took.Load(), n, h.acquire.Round(time.Second), float64(took.Load())/h.acquire.Seconds(), ErrTooSlow)
	}
	for _, l := range h.leases {
		if l.Err() != nil {
			h.lostTaking++
		}
	}
	return nil
}

// hold holds the leases for four renewal periods, watching the
// goroutines, and measures.
func (h *heldRun) hold() (Result, error) {
	hold := 4 * h.ttl / 3
	s0, st0 := h.cnt.snapshot(), storeCount(h.cfg)
	start := time.Now()
	gor := runtime.NumGoroutine()
	tick := time.NewTicker(50 * time.Millisecond)
	for time.Since(start) < hold {
		<-tick.C
		gor = max(gor, runtime.NumGoroutine())
	}
	tick.Stop()
	el := time.Since(start)
	d, st := h.cnt.snapshot().sub(s0), storeCount(h.cfg)-st0
	heap := heapInUse()
	writeHeapProfile(len(h.leases))
	lost := 0
	var lostErr error
	for _, l := range h.leases {
		if err := l.Err(); err != nil {
			lost++
			lostErr = err
		}
	}
	n := len(h.leases)
	r := Result{Workload: "held" + strconv.Itoa(n), Ops: int64(n), Elapsed: el}
	r.add(float64(int64(heap)-int64(h.heap0))/float64(n), "B/lease")
	r.add(float64(int64(heap)-int64(h.heapTenth))/float64(n-n/10), "marginal-B/lease")
	r.add(float64(h.gor0), "goroutines-before")
	r.add(float64(gor), "goroutines")
	r.add(float64(d.renewals())/el.Seconds(), "renew-calls/s")
	r.add(float64(d.renewItems)/el.Seconds(), "renew-items/s")
	r.add(float64(d.renewItems)/float64(n), "renewals/lease")
	if h.cfg.Requests != nil {
		r.add(float64(st)/el.Seconds(), "store-req/s")
	}
	r.add(float64(lost), "lost")
	r.add(float64(h.lostTaking), "lost-taking")
	r.add(h.acquire.Seconds(), "acquire-s")
	r.add(float64(h.retries.Load()), "lock-retries")
	r.add(float64(h.cnt.renewErrs.Load()), "renew-errs")
	r.add(time.Duration(h.cnt.renewMax.Load()).Seconds(), "renew-max-s")
	if lost > 0 {
		// A failed benchmark prints no metrics: the error says them.
		return r, fmt.Errorf("%d of %d leases lost, %d of them while taking the others (TTL %v; %d renewals cut off by their context's deadline; %s), e.g.: %w",
			lost, n, h.lostTaking, h.ttl, h.cnt.renewCut.Load(), metricsText(r.Metrics), lostErr)
	}
	return r, nil
}

// writeHeapProfile writes the heap profile of the process while it holds
// n leases to the file named by DLOCK_BENCH_HELD_HEAPPROFILE with the size
// appended ("" writes none), to see what is kept per lease (run with
// -memprofilerate 512 for a fine sample).
func writeHeapProfile(n int) {
	path := os.Getenv("DLOCK_BENCH_HELD_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path + "." + strconv.Itoa(n))
	if err != nil {
		return
	}
	defer f.Close()
	pprof.Lookup("heap").WriteTo(f, 0)
}

// metricsText is ms as "value unit" pairs.
func metricsText(ms []Metric) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = strconv.FormatFloat(m.Value, 'g', 4, 64) + " " + m.Unit
	}
	return strings.Join(s, ", ")
}
