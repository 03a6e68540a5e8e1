package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// Workloads are the workloads [RunWorkload] knows, in the order they are
// best run: each is what dlocktest.Bench runs under the same name, measured for a
// time instead of a number of operations. "herd" and "held" run every size
// of [WorkloadConfig]; "herdN" and "heldN" run size N alone.
var Workloads = []string{"uncontended", "distinct", "contended8", "contended64", "semaphore4x16", "rw90", "herd", "held"}

// Store is the store [RunWorkload] measures.
type Store struct {
	// NewBackend connects one more backend to the store; each stands for
	// a process of its own (the contenders get one each).
	NewBackend func(ctx context.Context) (dlock.Backend, error)
	// Options are the Client options, such as dlock.Fair().
	Options []dlock.Option
	// Requests, if set, returns the requests the store has served so far,
	// as the store counts them (all its clients'); the workloads then
	// report store-req/op (or per release, or per second of holding).
	Requests func() int64
}

// WorkloadConfig sets the durations and sizes of [RunWorkload]. Its zero
// value means the defaults of dlocktest.Bench.
type WorkloadConfig struct {
	Duration  time.Duration // measured time of each workload: 4s
	Warmup    time.Duration // run first and not measured: 0.5s
	HerdSizes []int         // waiters: 10, 100, 1000
	HeldSizes []int         // leases: 10,000 and 100,000
	HeldTTL   time.Duration // TTL of the held leases: 3s per 10,000 (see [Config.HeldTTL])
}

// ErrUnknownWorkload is the error of [RunWorkload] and [CheckWorkloads]
// for a workload name they do not know.
var ErrUnknownWorkload = errors.New("unknown workload")

// CheckWorkloads returns an error matching [ErrUnknownWorkload] naming
// the first of names that [RunWorkload] does not know.
func CheckWorkloads(names []string) error {
	for _, n := range names {
		if _, _, err := parseWorkload(n); err != nil {
			return err
		}
	}
	return nil
}

// parseWorkload splits herd100 into herd and 100; n is 0 without a size.
func parseWorkload(name string) (base string, n int, err error) {
	if slices.Contains(Workloads, name) {
		return name, 0, nil
	}
	for _, base := range []string{"herd", "held"} {
		if s, ok := strings.CutPrefix(name, base); ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				return base, n, nil
			}
		}
	}
	return "", 0, fmt.Errorf("%w %q (known: %s, herdN, heldN)", ErrUnknownWorkload, name, strings.Join(Workloads, ", "))
}

// RunWorkload runs the named workload (one of [Workloads]) on s, without
// testing.B, and returns one Result per size. progress, if not nil, is
// told what starts. Every Result has calls/op (or per release), the
// backend calls of the workload's Clients, and store-req/op when
// s.Requests is set.
func RunWorkload(ctx context.Context, s Store, name string, wc WorkloadConfig, progress func(phase string)) ([]Result, error) {
	base, size, err := parseWorkload(name)
	if err != nil {
		return nil, err
	}
	wc = wc.withDefaults()
	if progress == nil {
		progress = func(string) {}
	}
	cnt := new(calls)
	newBackend := func() (dlock.Backend, error) {
		b, err := s.NewBackend(ctx)
		if err != nil {
			return nil, err
		}
		return counted(b, cnt), nil
	}
	cfg := DefaultConfig()
	if wc.HeldTTL > 0 {
		cfg.HeldTTL = wc.HeldTTL
	}
	cfg.Requests = s.Requests
	sizes := func(all []int) []int {
		if size > 0 {
			return []int{size}
		}
		return all
	}
	switch base {
	case "herd":
		return runSizes(sizes(wc.HerdSizes), "herd", progress, func(n int) (Result, error) {
			return Herd(newBackend, s.Options, cfg, n, TimeSpan(wc.Duration, nil))
		})
	case "held":
		return runSizes(sizes(wc.HeldSizes), "held", progress, func(n int) (Result, error) {
			return Held(newBackend, cfg, n)
		})
	}
	r, err := runLockers(ctx, s, base, wc, newBackend, cnt, progress)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}

func (wc WorkloadConfig) withDefaults() WorkloadConfig {
	def := DefaultConfig()
	if wc.Duration <= 0 {
		wc.Duration = 4 * time.Second
	}
	if wc.Warmup < 0 {
		wc.Warmup = 0
	} else if wc.Warmup == 0 {
		wc.Warmup = 500 * time.Millisecond
	}
	if wc.HerdSizes == nil {
		wc.HerdSizes = def.Herd
	}
	if wc.HeldSizes == nil {
		wc.HeldSizes = def.Held
	}
	if wc.HeldTTL <= 0 {
		wc.HeldTTL = def.HeldTTL // 0 still: by size
	}
	return wc
}

func runSizes(sizes []int, base string, progress func(string), run func(n int) (Result, error)) ([]Result, error) {
	var rs []Result
	for _, n := range sizes {
		progress(base + strconv.Itoa(n))
		r, err := run(n)
		if err != nil {
			return rs, fmt.Errorf("%s%d: %w", base, n, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// runLockers runs uncontended, distinct, contendedN, semaphore4x16 or
// rw90 on Clients of s (one per contender): a warm-up, then the measured
// run, with the calls counted in between.
func runLockers(ctx context.Context, s Store, base string, wc WorkloadConfig, newBackend BackendFunc, cnt *calls, progress func(string)) (Result, error) {
	n := 1
	if c, ok := strings.CutPrefix(base, "contended"); ok {
		n, _ = strconv.Atoi(c)
	} else if base == "semaphore4x16" || base == "rw90" {
		n = WeightedContenders
	}
	clients := make([]*dlock.Client, n)
	for i := range clients {
		b, err := newBackend()
		if err != nil {
			return Result{}, err
		}
		c, err := dlock.New(b, s.Options...)
		if err != nil {
			b.Close()
			return Result{}, err
		}
		defer c.Close()
		clients[i] = c
	}
	prefix := namePrefix()
	run := func(sp *Span) (Result, error) {
		switch base {
		case "uncontended":
			return Uncontended(ctx, ClientLocker(clients[0]), prefix+"u", sp)
		case "distinct":
			return Distinct(ctx, ClientLocker(clients[0]), prefix+"d/", 32, sp)
		case "semaphore4x16":
			sems := make([]Semaphorer, n)
			for i, c := range clients {
				sems[i] = ClientSemaphorer(c)
			}
			return SemaphoreContended(ctx, sems, prefix+base, SemaphoreLimit, ContendedWork, sp)
		case "rw90":
			rws := make([]RWLocker, n)
			for i, c := range clients {
				rws[i] = ClientRWLocker(c)
			}
			return RWContended(ctx, rws, prefix+base, RWWriteEvery, ContendedWork, sp)
		}
		lockers := make([]Locker, n)
		for i, c := range clients {
			lockers[i] = ClientLocker(c)
		}
		return Contended(ctx, lockers, prefix+base, ContendedWork, sp)
	}
	if wc.Warmup > 0 {
		progress(base + " warm-up")
		if _, err := run(TimeSpan(wc.Warmup, nil)); err != nil {
			return Result{}, fmt.Errorf("%s: %w", base, err)
		}
	}
	progress(base)
	s0, st0 := cnt.snapshot(), storeRequests(s)
	r, err := run(TimeSpan(wc.Duration, nil))
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", base, err)
	}
	d, st := cnt.snapshot().sub(s0), storeRequests(s)-st0
	if r.Ops > 0 {
		r.add(float64(d.requests())/float64(r.Ops), "calls/op")
		if s.Requests != nil {
			r.add(float64(st)/float64(r.Ops), "store-req/op")
		}
	}
	return r, nil
}

func storeRequests(s Store) int64 {
	if s.Requests == nil {
		return 0
	}
	return s.Requests()
}
