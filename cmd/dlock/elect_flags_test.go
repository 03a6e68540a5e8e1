package main

import (
	"strings"
	"testing"
)

// TestFlagsAfterTheName: `dlock elect NAME --value V -- CMD` (the form its
// help shows) and `dlock leader NAME --json` take the flags that follow the
// name; before, elect tried to run "--value" as the command.
func TestFlagsAfterTheName(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	r := runDlock(t, nil, "elect", "--url", u, "sched", "--value", "host-a:8080", "--",
		"sh", "-c", `test -n "$DLOCK_TOKEN" && exec "$0" leader --url "$1" sched --json`, dlockBin, u)
	if r.code != 0 {
		t.Fatalf("elect with --value after the name: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, `"value":"host-a:8080"`) {
		t.Errorf("leader --json while leading printed %q; want the value host-a:8080", r.stdout)
	}
	if r := runDlock(t, nil, "leader", "--url", u, "sched"); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "no leader") {
		t.Errorf("leader after the command ended: exit %d, %q %q; want 1, no leader", r.code, r.stdout, r.stderr)
	}
}
