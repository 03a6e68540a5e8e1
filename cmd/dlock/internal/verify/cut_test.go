package verify

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServerCutApplies: the matrix offers server-cut to the ensembles
// only, and a store that cannot take it says why before a run starts.
func TestServerCutApplies(t *testing.T) {
	for _, kind := range LocalKinds {
		want := kind == "zookeeper" || kind == "etcd"
		if got := slices.Contains(faultsFor(kind, allFaults), FaultServerCut); got != want {
			t.Errorf("faultsFor(%s) has server-cut: %v, want %v", kind, got, want)
		}
	}
	for _, l := range []*Local{
		{Kind: "redis"},
		{Kind: "etcd", cutWhy: "a member is cut off in a network namespace of its own, which cannot be made here: not root"},
	} {
		cfg := Config{URL: "mem://", Workers: 2, Duration: time.Second, TTL: time.Second, Out: t.TempDir(), Faults: []string{FaultServerCut}, Local: l}
		err := cfg.check()
		if err == nil || !strings.Contains(err.Error(), "not applicable to --local "+l.Kind) {
			t.Errorf("server-cut on %s: %v, want not applicable", l.Kind, err)
		}
		if l.cutWhy != "" && !strings.Contains(err.Error(), "not root") {
			t.Errorf("server-cut on %s: %v does not say why", l.Kind, err)
		}
	}
	if err := (&Config{URL: "mem://", Workers: 2, Duration: time.Second, TTL: time.Second, Out: t.TempDir(), Faults: []string{FaultServerCut}}).check(); err == nil || !strings.Contains(err.Error(), "--local") {
		t.Errorf("server-cut without --local: %v", err)
	}
}
