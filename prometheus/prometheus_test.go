package dlockprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
	dlockprom "github.com/dlock-dev/dlock/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestScrapeAfterLockWaitAndLoss scrapes a registry after a lock, a
// contended wait and a loss (MaxHold).
func TestScrapeAfterLockWaitAndLoss(t *testing.T) {
	ctx := context.Background()
	col := dlockprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	c, err := dlock.New(mem.New(), dlock.WithTracer(col))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Mutex("job", dlock.TTL(200*time.Millisecond), dlock.MaxHold(400*time.Millisecond)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("job").TryLock(ctx); err == nil {
		t.Fatal("TryLock of a held lock succeeded")
	}
	second, err := c.Mutex("job").Lock(ctx) // waits until MaxHold ends the first
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP dlock_lock_acquisitions_total Acquisitions, by outcome.
# TYPE dlock_lock_acquisitions_total counter
dlock_lock_acquisitions_total{backend="mem",kind="mutex",outcome="busy"} 1
dlock_lock_acquisitions_total{backend="mem",kind="mutex",outcome="granted"} 2
# HELP dlock_lock_held Leases held now.
# TYPE dlock_lock_held gauge
dlock_lock_held{backend="mem",kind="mutex"} 0
# HELP dlock_lock_losses_total Leases that ended other than by Unlock, by cause.
# TYPE dlock_lock_losses_total counter
dlock_lock_losses_total{backend="mem",cause="max_hold",kind="mutex"} 1
# HELP dlock_lock_waiting Acquisitions waiting now.
# TYPE dlock_lock_waiting gauge
dlock_lock_waiting{backend="mem",kind="mutex"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"dlock_lock_acquisitions_total", "dlock_lock_held", "dlock_lock_losses_total", "dlock_lock_waiting"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "dlock_lock_wait_seconds", "dlock_lock_hold_seconds", "dlock_lock_renewal_seconds"); err != nil || n < 4 {
		t.Errorf("histogram series: %d, %v", n, err)
	}
	// The contended wait lasted until MaxHold: at least 0.3 s.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "dlock_lock_wait_seconds" {
			continue
		}
		var max float64
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleSum() > max {
				max = h.GetSampleSum()
			}
		}
		if max < 0.3 {
			t.Errorf("wait_seconds sums at most %v s; the contended wait was ≥ 0.3 s", max)
		}
	}
}

// TestLockNameOptIn: the name label appears only with WithLockName.
func TestLockNameOptIn(t *testing.T) {
	ctx := context.Background()
	for _, withName := range []bool{false, true} {
		var opts []dlockprom.Option
		if withName {
			opts = append(opts, dlockprom.WithLockName())
		}
		col := dlockprom.New(opts...)
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(col)
		c, _ := dlock.New(mem.New(), dlock.WithTracer(col))
		l, _ := c.Mutex("named").Lock(ctx)
		l.Unlock(ctx)
		c.Close()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				has := false
				for _, lp := range m.GetLabel() {
					has = has || lp.GetName() == "name" && lp.GetValue() == "named"
				}
				if has != withName {
					t.Errorf("WithLockName %v: %s has the name label: %v", withName, mf.GetName(), has)
				}
			}
		}
	}
}
