package workload

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// TestCountedKeepsCapabilities: the counting wrapper offers BatchRenewer
// and Inspector exactly when the backend does, since the Client renews and
// compensates differently on their presence.
func TestCountedKeepsCapabilities(t *testing.T) {
	be := mem.NewStore().Backend()
	for _, tc := range []struct {
		name           string
		b              dlock.Backend
		batch, inspect bool
	}{
		{"mem", be, true, true},
		{"plain", struct{ dlock.Backend }{be}, false, false},
		{"batch", struct {
			dlock.Backend
			dlock.BatchRenewer
		}{be, be}, true, false},
		{"inspect", struct {
			dlock.Backend
			dlock.Inspector
		}{be, be}, false, true},
	} {
		w := counted(tc.b, new(calls))
		_, batch := w.(dlock.BatchRenewer)
		_, inspect := w.(dlock.Inspector)
		if batch != tc.batch || inspect != tc.inspect {
			t.Errorf("%s: wrapper is BatchRenewer %v, Inspector %v; want %v, %v", tc.name, batch, inspect, tc.batch, tc.inspect)
		}
	}
}

// TestCountedCounts: the wrapper counts the calls and items a Client
// makes, and the waiters it has registered.
func TestCountedCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cnt := new(calls)
	c, err := dlock.New(counted(mem.NewStore().Backend(), cnt), dlock.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var leases []*dlock.Lease
	for _, name := range []string{"a", "b", "c"} {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Mutex("a").Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	for cnt.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Second) // a renewal period and more
	if s := cnt.snapshot(); s.renewItems < 3 || s.renew != 0 || s.renewBatch == 0 {
		t.Errorf("after a renewal period: %d renew, %d batch calls of %d items; want batches of the 3 leases", s.renew, s.renewBatch, s.renewItems)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	s := cnt.snapshot()
	if s.acquire != 4 || s.release != 4 || s.waiterAcquire == 0 || cnt.waiting.Load() != 0 {
		t.Errorf("acquire %d, release %d, waiter acquire %d, waiting %d; want 4, 4, >0, 0", s.acquire, s.release, s.waiterAcquire, cnt.waiting.Load())
	}
}

// TestScaleWorkloads runs Held and Herd, small, on mem: they report
// their figures, nothing is lost, and every lease is renewed as often as
// held for four renewal periods means.
func TestScaleWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("holds leases for seconds")
	}
	s := mem.NewStore()
	f := func() (dlock.Backend, error) { return s.Backend(), nil }
	cfg := DefaultConfig()
	cfg.HeldTTL, cfg.HerdClients = time.Second, 2
	r, err := Held(f, cfg, 200)
	t.Logf("Held: %v", r)
	if err != nil {
		t.Fatal(err)
	}
	if lost, ok := r.Metric("lost"); !ok || lost != 0 || metric(r, "renewals/lease") < 3 || metric(r, "goroutines") == 0 {
		t.Errorf("Held: %v; want lost 0, renewals/lease >= 3, goroutines > 0", r.Metrics)
	}
	for _, opts := range [][]dlock.Option{nil, {dlock.Fair()}} {
		r, err := Herd(f, opts, cfg, 5, OpsSpan(50, nil))
		t.Logf("Herd: %v", r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Ops != 50 || metric(r, "calls/release") < 2 || metric(r, "handoff-p50-µs") <= 0 {
			t.Errorf("Herd: %v; want 50 grants, at least 2 calls/release (a release and a grant) and a hand-off time", r)
		}
	}
	if infos, err := s.Backend().Inspect(context.Background(), ""); err != nil || len(infos) != 0 {
		t.Errorf("left behind: %v, %v", infos, err)
	}
}

// metric is r's metric in unit, or NaN.
func metric(r Result, unit string) float64 {
	if v, ok := r.Metric(unit); ok {
		return v
	}
	return math.NaN()
}
