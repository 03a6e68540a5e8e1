package dlockprom_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/dlock-dev/dlock"
	_ "github.com/dlock-dev/dlock/mem"
	dlockprom "github.com/dlock-dev/dlock/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Expose a Client's locks to Prometheus (serve the registry with promhttp
// in a real program).
func Example() {
	ctx := context.Background()
	col := dlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	c, _ := dlock.Open(ctx, "mem://", dlock.WithTracer(col))
	defer c.Close()
	l, _ := c.Mutex("nightly").Lock(ctx)
	l.Unlock(ctx)

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "dlock_lock_acquisitions_total" {
			var b strings.Builder
			expfmt.MetricFamilyToText(&b, mf)
			for _, line := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(line, "dlock_") {
					fmt.Fprintln(os.Stdout, line)
				}
			}
		}
	}
	// Output: dlock_lock_acquisitions_total{backend="mem",kind="mutex",outcome="granted"} 1
}
