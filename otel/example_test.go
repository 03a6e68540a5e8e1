package dlockotel_test

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/mem"
	dlockotel "github.com/dlock-dev/dlock/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Report a Client's locks to an OpenTelemetry MeterProvider (a
// ManualReader here; a real program uses its exporter's reader).
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	tr, err := dlockotel.New(dlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		panic(err)
	}
	c, err := dlock.Open(ctx, "mem://", dlock.WithTracer(tr))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	l, _ := c.Mutex("nightly").Lock(ctx)
	l.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.lock.acquisitions" {
			out, _ := s.DataPoints[0].Attributes.Value("dlock.outcome")
			fmt.Println(m.Name, out.AsString(), s.DataPoints[0].Value)
		}
	}
	// Output: dlock.lock.acquisitions granted 1
}
