//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"strings"
	"testing"
)

// TestKindsOnSQLite: --limit, -s, -x and elect either run (a backend that
// grants them) or are refused with exit 2 and a message naming the
// backend's limit; leader of a free election says "no leader" and exits 1.
func TestKindsOnSQLite(t *testing.T) {
	u := sqliteURL(t)
	for _, args := range [][]string{
		{"run", "--url", u, "--limit", "2", "k1", "sh", "-c", "echo ran"},
		{"run", "--url", u, "-s", "k2", "sh", "-c", "echo ran"},
		{"run", "--url", u, "-x", "k3", "sh", "-c", "echo ran"},
		{"elect", "--url", u, "k4", "--", "sh", "-c", "echo ran"},
	} {
		r := runDlock(t, nil, args...)
		switch r.code {
		case 0:
			if strings.TrimSpace(r.stdout) != "ran" {
				t.Errorf("%q: stdout %q", args, r.stdout)
			}
		case 2:
			if !strings.Contains(r.stderr, "cannot hold this kind of lock") || !strings.Contains(r.stderr, "sqlite") {
				t.Errorf("%q refused without a clear message: %q", args, r.stderr)
			}
		default:
			t.Errorf("%q: exit %d; stderr %q", args, r.code, r.stderr)
		}
	}
	r := runDlock(t, nil, "leader", "--url", u, "k5")
	if r.code != 1 || strings.TrimSpace(r.stdout) != "no leader" {
		t.Errorf("leader of a free election: exit %d, %q", r.code, r.stdout)
	}
	r = runDlock(t, nil, "run", "--url", u, "--limit", "2", "-s", "k6", "true")
	if r.code != 64 || !strings.Contains(r.stderr, "--limit and -s/-x together") {
		t.Errorf("--limit with -s: exit %d, %q", r.code, r.stderr)
	}
}
