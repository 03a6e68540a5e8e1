package dlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
	dlockotel "github.com/dlock-dev/dlock/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestExportAfterLockWaitAndLoss: a lock, a contended wait and a loss
// (MaxHold) appear in the in-memory exports: counters by outcome and
// cause, histograms of wait and hold time, held and pending gauges back at
// zero, and the spans with the wait event and the token.
func TestExportAfterLockWaitAndLoss(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tr, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(mem.New(), dlock.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	first, err := c.Mutex("job", dlock.TTL(200*time.Millisecond), dlock.MaxHold(400*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Mutex("job").Lock(ctx) // waits until MaxHold ends the first
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	sum := func(name, key, value string) int64 {
		t.Helper()
		s, ok := got[name].(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s: %T, want an int64 sum", name, got[name])
		}
		var n int64
		for _, dp := range s.DataPoints {
			if v, ok := dp.Attributes.Value(attribute.Key(key)); key == "" || ok && v.AsString() == value {
				n += dp.Value
			}
		}
		return n
	}
	if n := sum("dlock.lock.acquisitions", "dlock.outcome", "granted"); n != 2 {
		t.Errorf("granted acquisitions %d, want 2", n)
	}
	if n := sum("dlock.lock.losses", "dlock.cause", "max_hold"); n != 1 {
		t.Errorf("losses by max_hold %d, want 1", n)
	}
	if n := sum("dlock.lock.held", "", ""); n != 0 {
		t.Errorf("held now %d, want 0", n)
	}
	if n := sum("dlock.lock.pending_requests", "", ""); n != 0 {
		t.Errorf("pending now %d, want 0", n)
	}
	wait, ok := got["dlock.lock.wait_time"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("wait_time: %T", got["dlock.lock.wait_time"])
	}
	var waits uint64
	var maxWait float64
	for _, dp := range wait.DataPoints {
		waits += dp.Count
		if m, ok := dp.Max.Value(); ok && m > maxWait {
			maxWait = m
		}
	}
	if waits != 2 || maxWait < 0.3 {
		t.Errorf("wait_time: %d waits, longest %vs; want 2, the contended one ≥ 0.3s", waits, maxWait)
	}
	if _, ok := got["dlock.lock.hold_time"].(metricdata.Histogram[float64]); !ok {
		t.Errorf("no hold_time histogram")
	}

	var acquires, releases, waitEvents int
	for _, s := range spans.GetSpans() {
		switch s.Name {
		case "dlock.acquire":
			acquires++
			for _, e := range s.Events {
				if e.Name == "dlock.wait" {
					waitEvents++
				}
			}
			var token bool
			for _, a := range s.Attributes {
				token = token || a.Key == "dlock.token"
			}
			if !token {
				t.Errorf("an acquire span without the token: %v", s.Attributes)
			}
		case "dlock.release":
			releases++
		}
	}
	if acquires != 2 || releases != 2 || waitEvents != 1 {
		t.Errorf("spans: %d acquire, %d release, %d wait events; want 2, 2, 1", acquires, releases, waitEvents)
	}
	_ = first
}
