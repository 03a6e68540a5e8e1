//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"strings"
	"testing"
)

// TestKindsOnSQLite: --limit and -s/-x really run on SQLite, across
// processes: two --limit 2 holders at once and a third busy; two -s
// holders at once and a -x busy. elect either runs or is refused with
// exit 2 and a message naming the backend; leader of a free election
// says "no leader" and exits 1.
func TestKindsOnSQLite(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	for _, tc := range []struct {
		name       string
		held, busy []string
	}{
		{"k1", []string{"--limit", "2"}, []string{"--limit", "2"}},
		{"k2", []string{"-s"}, []string{"-x"}},
	} {
		holdLock(t, u, tc.name, tc.held...)
		holdLock(t, u, tc.name, tc.held...) // at once with the first
		args := append(append([]string{"run", "--url", u, "--name", tc.name, "--wait", "0"}, tc.busy...), "--", "sh", "-c", "echo ran")
		if r := runDlock(t, nil, args...); r.code != exitBusy || r.stdout != "" {
			t.Errorf("%q while two %q holders hold it: exit %d, stdout %q, want %d (busy); stderr:\n%s", args, tc.held, r.code, r.stdout, exitBusy, r.stderr)
		}
	}
	args := []string{"elect", "--url", u, "k4", "--", "sh", "-c", "echo ran"}
	r := runDlock(t, nil, args...)
	switch r.code {
	case 0:
		if strings.TrimSpace(r.stdout) != "ran" {
			t.Errorf("%q: stdout %q", args, r.stdout)
		}
	case 2:
		if !strings.Contains(r.stderr, "sqlite") || !strings.Contains(r.stderr, "election") {
			t.Errorf("%q refused without a clear message: %q", args, r.stderr)
		}
	default:
		t.Errorf("%q: exit %d; stderr %q", args, r.code, r.stderr)
	}
	r = runDlock(t, nil, "leader", "--url", u, "k5")
	if r.code != 1 || strings.TrimSpace(r.stdout) != "no leader" {
		t.Errorf("leader of a free election: exit %d, %q", r.code, r.stdout)
	}
	r = runDlock(t, nil, "run", "--url", u, "--limit", "2", "-s", "k6", "true")
	if r.code != 64 || !strings.Contains(r.stderr, "--limit and -s/-x together") {
		t.Errorf("--limit with -s: exit %d, %q", r.code, r.stderr)
	}
}
