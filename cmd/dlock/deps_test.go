package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestTooling: the dlock binary links neither testing nor
// the test tooling (goleak, the conformance suite), which it once did
// through dlocktest's workload runner.
func TestBinaryLinksNoTestTooling(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range []string{"testing", "go.uber.org/goleak", "github.com/dlock-dev/dlock/dlocktest"} {
		if slices.Contains(deps, p) {
			t.Errorf("the dlock binary links %s", p)
		}
	}
}
