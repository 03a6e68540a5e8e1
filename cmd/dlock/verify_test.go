//go:build linux

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// verifyResult is the part of result.json the tests read.
type verifyResult struct {
	Pass       bool           `json:"pass"`
	Porcupine  string         `json:"porcupine"`
	Grants     int            `json:"grants"`
	Faults     int            `json:"faults_injected"`
	Violations map[string]int `json:"violations"`
	Writes     int            `json:"writes"`
	Accepted   int            `json:"accepted"`
}

func readVerifyResult(t *testing.T, out string) verifyResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r verifyResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestVerifySQLite: pause and kill faults on the embedded default find no
// violation, and the faults did happen.
func TestVerifySQLite(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	r := runDlock(t, nil, "verify", "--url", sqliteURL(t), "--out", out, "--duration", "6s", "--ttl", "400ms", "--seed", "7")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := readVerifyResult(t, out)
	if !res.Pass || res.Grants < 20 || res.Faults < 1 || res.Accepted == 0 || res.Porcupine != "Ok" {
		t.Fatalf("result %+v", res)
	}
	for _, f := range []string{"report.md", "result.json", "grants.png", "history.html", "history/resource.jsonl", "history/worker-0.jsonl", "history/faults.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestVerifyMutations: a run with the fence off, with validity ignored, or
// with a lock that is no lock must fail, with the violations it should
// find.
func TestVerifyMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutate string
		want   string // the violation that must be there
	}{
		{"fence-off", "c"},
		{"validity-off", "a"},
		{"broken-lock", "b"},
	} {
		t.Run(tc.mutate, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := runDlock(t, nil, "verify", "--url", sqliteURL(t), "--out", out, "--duration", "5s", "--ttl", "300ms",
				"--seed", "3", "--faults", "pause", "--mutate", tc.mutate)
			if r.code != exitFailure {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitFailure, r.stdout, r.stderr)
			}
			res := readVerifyResult(t, out)
			if res.Pass || res.Violations[tc.want] == 0 || (tc.want != "c" && res.Porcupine != "Illegal") {
				t.Fatalf("result %+v: want (%s) violations", res, tc.want)
			}
		})
	}
}

// TestVerifySkew: a client clock 30% slow is far beyond dlock's Drift: its
// workers' promises break, and the run reports those violations labelled
// as outside the assumptions, not as a failure; within the Drift there are
// none.
func TestVerifySkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		skew    string
		outside bool
	}{{"-0.3", true}, {"-0.005", false}} {
		t.Run(tc.skew, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := runDlock(t, nil, "verify", "--url", sqliteURL(t), "--out", out, "--duration", "6s", "--ttl", "300ms",
				"--workers", "4", "--faults", "skew,pause", "--skew", tc.skew, "--seed", "5")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			res := readVerifyResult(t, out)
			if got := res.Violations["a_outside"] > 0; got != tc.outside {
				t.Fatalf("labelled (a) violations %d, want some: %v\n%s", res.Violations["a_outside"], tc.outside, r.stdout)
			}
		})
	}
}

func TestVerifyBadInput(t *testing.T) {
	t.Parallel()
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"out not empty", []string{"--url", sqliteURL(t), "--out", full}, exitUsage, "not empty"},
		{"ttl too short", []string{"--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o"), "--ttl", "10ms"}, exitUsage, "minimum"},
		{"unknown fault", []string{"--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o"), "--faults", "meteor"}, exitUsage, "meteor"},
		{"unreachable", []string{"--url", "redis://127.0.0.1:1", "--out", filepath.Join(t.TempDir(), "o")}, exitBackend, "127.0.0.1:1"},
		{"server fault without --local", []string{"--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o"), "--faults", "server-kill"}, exitUsage, "--local"},
		{"server-cut on sqlite", []string{"--local", "sqlite", "--out", filepath.Join(t.TempDir(), "o"), "--faults", "server-cut"}, exitUsage, "not applicable"},
		{"network fault on sqlite", []string{"--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o"), "--faults", "cut"}, exitUsage, "no link to the store"},
		{"unknown local", []string{"--local", "nosuch", "--out", filepath.Join(t.TempDir(), "o")}, exitBackend, "want one of"},
		{"url and local", []string{"--local", "redis", "--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o")}, exitUsage, "exclude"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runDlock(t, nil, append([]string{"verify"}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
				t.Fatalf("exit %d, want %d; stderr %q should say %q", r.code, tc.code, r.stderr, tc.msg)
			}
		})
	}
}

// TestVerifyLocalRedis: dlock verify runs its own Redis server and kills
// and restarts it; a Redis server that comes back empty is outside the
// backend's assumptions, and the run labels what that fault caused instead
// of failing. The server is gone afterwards.
func TestVerifyLocalRedis(t *testing.T) {
	t.Parallel()
	testserver.Require(t, testserver.KindRedis)
	out := filepath.Join(t.TempDir(), "out")
	r := runDlock(t, nil, "verify", "--local", "redis", "--out", out, "--duration", "8s", "--ttl", "500ms",
		"--workers", "3", "--faults", "server-kill,server-pause", "--seed", "2")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "| server-kill | ") || !strings.Contains(string(report), "forgets its locks") {
		t.Fatalf("report.md has no labelled server-kill row:\n%s", report)
	}
	b, _ := os.ReadFile(filepath.Join(out, "result.json"))
	var res struct {
		URL string `json:"url"`
	}
	json.Unmarshal(b, &res)
	addr := strings.TrimPrefix(res.URL, "redis://")
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("the server at %s still runs after dlock verify exited", addr)
	}
}

// TestVerifyInterrupted: SIGINT in the middle of a run stops every worker
// and writes the report of what ran.
func TestVerifyInterrupted(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	p := start(t, nil, "verify", "--url", sqliteURL(t), "--out", out, "--duration", "60s", "--ttl", "300ms", "--faults", "pause")
	waitStderr(t, p, "verify: 2s of")
	pids := workerPIDs(t, p.cmd.Process.Pid)
	if len(pids) == 0 {
		t.Fatal("no worker processes")
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, p.stderr.String())
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("worker %d still runs", pid)
		}
	}
	if res := readVerifyResult(t, out); res.Grants == 0 {
		t.Fatalf("result %+v", res)
	}
}

// workerPIDs lists the children of pid (started by any of its threads).
func workerPIDs(t *testing.T, pid int) []int {
	t.Helper()
	files, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(s)
			pids = append(pids, n)
		}
	}
	return pids
}

// TestVerifyMatrix: --matrix runs each kind × fault fenced and unfenced and
// writes the table, which names the command and every cell.
func TestVerifyMatrix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	table := filepath.Join(dir, "VERIFICATION.md")
	r := runDlock(t, nil, "verify", "--matrix", "--local", "sqlite", "--faults", "pause,kill", "--duration", "3s",
		"--ttl", "300ms", "--workers", "3", "--out", filepath.Join(dir, "out"), "--table", table)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dlock verify --matrix --local sqlite", "| sqlite | pause |", "| sqlite | kill |", "modernc.org/sqlite"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the table has no %q:\n%s", want, b)
		}
	}
}

// TestVerifyKindsBrokenLock: for each kind, workers that each have a store
// of their own (the broken-lock mutation) break its invariant, and the run
// says so: the per-kind checks can fail on a real run.
func TestVerifyKindsBrokenLock(t *testing.T) {
	t.Parallel()
	for _, kind := range [][]string{{"semaphore", "--limit", "2"}, {"rw"}, {"election"}} {
		t.Run(kind[0], func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"verify", "--url", sqliteURL(t), "--out", out, "--duration", "3s", "--ttl", "300ms",
				"--seed", "3", "--faults", "pause", "--mutate", "broken-lock", "--kind"}, kind...)
			r := runDlock(t, nil, args...)
			if r.code != exitFailure {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitFailure, r.stdout, r.stderr)
			}
			res := readVerifyResult(t, out)
			if res.Pass || res.Violations["a"] == 0 || res.Porcupine != "Illegal" {
				t.Fatalf("result %+v: want (a) violations", res)
			}
		})
	}
}

// TestVerifyKindRefused: a backend that does not grant the kind is refused
// before any worker starts, with exit 2 and the backend's reason. Redlock
// refuses read-write locks for good (majority quorums cannot bound a count
// above 1).
func TestVerifyKindRefused(t *testing.T) {
	t.Parallel()
	testserver.Require(t, testserver.KindRedis)
	out := filepath.Join(t.TempDir(), "out")
	r := runDlock(t, nil, "verify", "--local", "redlock", "--kind", "rw", "--out", out, "--duration", "3s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--kind rw") || !strings.Contains(r.stderr, "cannot grant a read-write lock") {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "history", "worker-0.jsonl")); err == nil {
		t.Error("a worker ran")
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--kind", "semaphore"}, "needs --limit"},
		{[]string{"--kind", "semaphore", "--limit", "4"}, "never run out"},
		{[]string{"--kind", "rw", "--limit", "2"}, "--limit is for --kind semaphore"},
		{[]string{"--kind", "queue"}, "unknown kind"},
	} {
		r := runDlock(t, nil, append([]string{"verify", "--url", sqliteURL(t), "--out", filepath.Join(t.TempDir(), "o")}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: exit %d, want %d; stderr %q should say %q", tc.args, r.code, exitUsage, r.stderr, tc.msg)
		}
	}
}
