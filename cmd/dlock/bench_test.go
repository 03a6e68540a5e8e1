//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// runBenchJSON runs dlock bench with args and --json, and returns its
// report; it fails the test unless dlock exits 0.
func runBenchJSON(t *testing.T, args ...string) benchReport {
	t.Helper()
	r := runDlock(t, nil, append([]string{"bench", "--json", "--duration", "300ms"}, args...)...)
	if r.code != 0 {
		t.Fatalf("dlock bench %q: exit %d, stderr %s", args, r.code, r.stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("dlock bench --json %q: %v in %q", args, err, r.stdout)
	}
	return rep
}

// checkResults: the report has the workloads asked for, in order, each
// with operations and its figures, and the locker workloads make at least
// a Lock and an Unlock call per operation.
func checkResults(t *testing.T, rep benchReport, want ...string) {
	t.Helper()
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Workload)
		if r.Ops <= 0 || r.Seconds <= 0 || len(r.Metrics) == 0 {
			t.Errorf("%s: %+v; want operations, time and figures", r.Workload, r)
		}
		if c, ok := r.Metrics["calls/op"]; ok && c < 2 {
			t.Errorf("%s: %v calls/op; want a Lock and an Unlock at least", r.Workload, c)
		}
		if lost, ok := r.Metrics["lost"]; ok && lost != 0 {
			t.Errorf("%s: %v leases lost", r.Workload, lost)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("workloads %q; want %q", got, want)
	}
}

// TestBenchDefault runs dlock bench on the default backend, the SQLite
// file in the state directory, with no --url.
func TestBenchDefault(t *testing.T) {
	// Not parallel: held100 keeps 100 leases of a 3 s TTL renewed, which
	// other tests' load made fail.
	sqliteURL(t) // skips without the sqlite backend
	rep := runBenchJSON(t, "--workloads", "uncontended,distinct,contended8,rw90,herd10,held100")
	if !strings.HasPrefix(rep.URL, "sqlite://") || rep.Fair || rep.StoreCount != "" {
		t.Errorf("report of %s, fair %v, store count %q; want the default SQLite file, not fair, no store count", rep.URL, rep.Fair, rep.StoreCount)
	}
	// SQLite's lease tables grant read-write locks: nothing is skipped.
	checkResults(t, rep, "uncontended", "distinct", "contended8", "rw90", "herd10", "held100")
	if len(rep.Skipped) != 0 {
		t.Errorf("skipped %+v on SQLite, which grants every workload's kind", rep.Skipped)
	}
	for _, r := range rep.Results {
		if _, ok := r.Metrics["store-req/op"]; ok {
			t.Errorf("%s: store-req/op on SQLite, which does not count its statements", r.Workload)
		}
	}
}

// TestBenchSkipsARefusedKind: Redlock refuses read-write locks, so dlock
// bench skips rw90 there, saying why, and the run still succeeds.
func TestBenchSkipsARefusedKind(t *testing.T) {
	t.Parallel()
	u := "redlock://" + testserver.Redis(t).Addr()
	rep := runBenchJSON(t, "--url", u, "--workloads", "uncontended,rw90")
	checkResults(t, rep, "uncontended")
	if len(rep.Skipped) != 1 || rep.Skipped[0].Workload != "rw90" || !strings.Contains(rep.Skipped[0].Reason, "read-write lock") {
		t.Errorf("skipped %+v; want rw90, saying why", rep.Skipped)
	}
}

// TestBenchRedis runs dlock bench on a redis-server of the test's own: the
// server counts its commands, at least one for a Lock and one for an
// Unlock; and the table names every workload.
func TestBenchRedis(t *testing.T) {
	t.Parallel()
	u := "redis://" + testserver.Redis(t).Addr()
	rep := runBenchJSON(t, "--url", u, "--fair", "--workloads", "uncontended,contended8,semaphore4x16,rw90,herd10")
	if rep.URL != u || !rep.Fair || !strings.Contains(rep.StoreCount, "Redis commands") {
		t.Errorf("report of %s, fair %v, store count %q; want %s, fair, Redis commands", rep.URL, rep.Fair, rep.StoreCount, u)
	}
	checkResults(t, rep, "uncontended", "contended8", "semaphore4x16", "rw90", "herd10")
	for _, r := range rep.Results {
		if m, ok := r.Metrics["held-max"]; ok && (m < 1 || m > 4) {
			t.Errorf("%s: %v permits held at once; want 1 to 4", r.Workload, m)
		}
		st, ok := r.Metrics["store-req/op"]
		if r.Workload == "herd10" {
			st, ok = r.Metrics["store-req/release"]
		}
		if !ok || st < 2 {
			t.Errorf("%s: %v store requests per operation (reported %v); want >= 2", r.Workload, st, ok)
		}
	}

	res := runDlock(t, nil, "bench", "--url", u, "--duration", "200ms", "--workloads", "uncontended,distinct")
	if res.code != 0 || !strings.Contains(res.stdout, "WORKLOAD") || !strings.Contains(res.stdout, "\nuncontended ") ||
		!strings.Contains(res.stdout, "\ndistinct ") || !strings.Contains(res.stderr, "[2/2] distinct") {
		t.Errorf("table: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// TestBenchUsage: bad flags and workloads are usage errors that say what
// is wrong, before anything runs.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "mem://", "--workloads", "uncontended,contendid"}, `unknown workload "contendid"`},
		{[]string{"--url", "mem://", "--workloads", "herd0"}, `unknown workload "herd0"`},
		{[]string{"--url", "mem://", "--workloads", ""}, `unknown workload ""`},
		{[]string{"--url", "mem://", "--duration", "0"}, "--duration 0s: must be positive"},
		{[]string{"--url", "mem://", "--duration", "soon"}, `"soon" is not a duration`},
		{[]string{"--url", "mem://", "extra"}, "unexpected arguments"},
		{[]string{"--url", "nosuch://x"}, `unknown URL scheme "nosuch"`},
	} {
		r := runDlock(t, nil, append([]string{"bench"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("dlock bench %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	r := runDlock(t, nil, "help", "bench")
	if r.code != 0 || !strings.Contains(r.stdout, "contended64") || !strings.Contains(r.stdout, "semaphore4x16") || !strings.Contains(r.stdout, "--workloads") {
		t.Errorf("dlock help bench: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestBenchOpeners: dlock bench can open every scheme the binary knows.
func TestBenchOpeners(t *testing.T) {
	t.Parallel()
	for _, s := range dlock.Schemes() {
		if _, err := benchOpener(&url.URL{Scheme: s}); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := benchOpener(&url.URL{Scheme: "nosuch"}); err == nil {
		t.Error("nosuch: no error")
	}
}
