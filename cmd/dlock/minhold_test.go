//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"strings"
	"testing"
	"time"
)

// TestRunMinHold: dlock run --min-hold 3s of a command that exits at once
// exits 0 at once, and leaves the name taken in the default store (the
// SQLite file) with no process left: a second dlock run -n is busy until
// 3s after the first grant, then it is granted.
func TestRunMinHold(t *testing.T) {
	t.Parallel()
	const minHold = 3 * time.Second
	env := testEnv(t) // one state directory: the same default database
	began := time.Now()
	r := runDlock(t, env, "run", "--min-hold", "3s", "-n", "nightly", "true")
	if r.code != 0 {
		t.Fatalf("dlock run --min-hold 3s true: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	// The first dlock has exited; the name must still be taken.
	r = runDlock(t, env, "run", "-n", "nightly", "true")
	if r.code != flockConflict {
		t.Fatalf("dlock run -n right after a --min-hold run exited: exit %d, want %d (busy); stderr:\n%s", r.code, flockConflict, r.stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = runDlock(t, env, "run", "-n", "nightly", "true")
		if r.code == 0 {
			break
		}
		if r.code != flockConflict {
			t.Fatalf("dlock run -n after the min-hold: exit %d; stderr:\n%s", r.code, r.stderr)
		}
		if time.Now().After(deadline) {
			t.Fatal("the name was not granted again within 30s of a 3s min-hold")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(began); took < minHold {
		t.Errorf("granted again %v after the first run began, before its min-hold %v ended", took, minHold)
	}
}

// TestRunMinHoldNegative: a negative --min-hold is a usage error. (A
// backend that cannot keep a min-hold refuses it: TestZooKeeperRun.)
func TestRunMinHoldNegative(t *testing.T) {
	t.Parallel()
	r := runDlock(t, nil, "run", "--min-hold", "-1s", "--name", "j", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--min-hold -1s is negative") {
		t.Errorf("--min-hold -1s: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}
