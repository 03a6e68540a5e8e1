//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// holdLock starts a dlock run on url that holds the lock name until the
// test ends (or the returned proc is signalled), and returns it with the
// holder's owner id once it holds the lock.
func holdLock(t *testing.T, url, name string, extra ...string) (*proc, string) {
	t.Helper()
	p, owner, _ := holdLockToken(t, url, name, extra...)
	return p, owner
}

// holdLockToken is holdLock that also returns the holder's token.
func holdLockToken(t *testing.T, url, name string, extra ...string) (*proc, string, uint64) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	args := append([]string{"run", "--url", url, "--name", name}, extra...)
	args = append(args, "--", "sh", "-c", `echo "$DLOCK_OWNER $DLOCK_TOKEN" > "$0"; while :; do sleep 0.05; done`, ready)
	p := start(t, nil, args...)
	f := strings.Fields(waitFile(t, ready, p))
	if len(f) != 2 {
		t.Fatalf("holder wrote %q, want its owner and token", f)
	}
	token, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("holder's token: %v", err)
	}
	return p, f[0], token
}

// stop ends a holder started by holdLock: SIGTERM is forwarded to its
// command, which dies of it.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(); code != 128+int(syscall.SIGTERM) {
		p.t.Errorf("holder exit code %d, want 143; stderr:\n%s", code, p.stderr.String())
	}
}

func TestBusyWithoutWaiting(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	holder, owner := holdLock(t, url, "busy")
	r := runDlock(t, nil, "run", "--url", url, "--name", "busy", "--wait", "0", "--", "sh", "-c", "echo ran")
	if r.code != 3 {
		t.Fatalf("exit code %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("the command ran: %q", r.stdout)
	}
	for _, want := range []string{`"busy"`, "sqlite", "not acquired", owner} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, r.stderr)
		}
	}
	holder.stop()
	// Free again: --wait 0 takes it.
	if r := runDlock(t, nil, "run", "--url", url, "--name", "busy", "--wait", "0", "--", "true"); r.code != 0 {
		t.Fatalf("after release: exit code %d; stderr:\n%s", r.code, r.stderr)
	}
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	_, owner := holdLock(t, url, "slow")
	r := runDlock(t, nil, "run", "--url", url, "--name", "slow", "--wait", "500ms", "--", "sh", "-c", "echo ran")
	if r.code != 3 {
		t.Fatalf("exit code %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("the command ran: %q", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a waiting line and a giving-up line; stderr:\n%s", r.stderr)
	}
	for _, want := range []string{`waiting for lock "slow" on sqlite`, `held by "` + owner + `"`, "(token "} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("waiting line does not contain %q: %s", want, lines[0])
		}
	}
	for _, want := range []string{`lock "slow" on sqlite`, "not acquired", "--wait 500ms", owner} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("last line does not contain %q: %s", want, lines[1])
		}
	}
}

// A waiter without --wait waits until the holder is done, having said once
// for whom, then runs with the next token.
func TestWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	holder, owner, token := holdLockToken(t, url, "queue")
	waiter := start(t, nil, "run", "--url", url, "--name", "queue", "--fair", "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	waitStderr(t, waiter, "waiting for lock")
	holder.stop()
	if code := waiter.wait(); code != 0 {
		t.Fatalf("waiter exit code %d; stderr:\n%s", code, waiter.stderr.String())
	}
	// A new SQLite file's tokens start at the clock in µs, not at 1: the
	// next grant's is above the holder's.
	if got, err := strconv.ParseUint(strings.TrimSpace(waiter.stdout.String()), 10, 64); err != nil || got <= token {
		t.Errorf("waiter's command printed token %q, want one above the holder's %d", waiter.stdout.String(), token)
	}
	if n := strings.Count(waiter.stderr.String(), "waiting for lock"); n != 1 {
		t.Errorf("%d waiting lines, want 1:\n%s", n, waiter.stderr.String())
	}
	if !strings.Contains(waiter.stderr.String(), owner) {
		t.Errorf("the waiting line does not name the holder %s:\n%s", owner, waiter.stderr.String())
	}
}

// Commands run by concurrent dlock runs on one lock do not overlap, and
// each gets a higher token.
func TestConcurrentRunsSerialize(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	log := filepath.Join(t.TempDir(), "log")
	const n = 4
	var ps []*proc
	for range n {
		ps = append(ps, start(t, nil, "run", "--url", url, "--name", "serial", "--ttl", "10s", "--",
			"sh", "-c", `echo "start $DLOCK_TOKEN" >> "$0"; sleep 0.2; echo "end $DLOCK_TOKEN" >> "$0"`, log))
	}
	for _, p := range ps {
		if code := p.wait(); code != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", code, p.stderr.String())
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*n {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*n, b)
	}
	last := uint64(0)
	for i := 0; i < len(lines); i += 2 {
		s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(s) != 2 || len(e) != 2 || s[0] != "start" || e[0] != "end" || s[1] != e[1] {
			t.Fatalf("critical sections overlap:\n%s", b)
		}
		tok, _ := strconv.ParseUint(s[1], 10, 64)
		if tok <= last {
			t.Fatalf("token %d after %d:\n%s", tok, last, b)
		}
		last = tok
	}
}

// SIGINT while waiting gives up the wait: exit 130, and the lock is not
// taken behind the holder's back.
func TestInterruptWhileWaiting(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	holdLock(t, url, "intr")
	waiter := start(t, nil, "run", "--url", url, "--name", "intr", "--", "sh", "-c", "echo ran")
	waitStderr(t, waiter, "waiting for lock")
	waiter.cmd.Process.Signal(syscall.SIGINT)
	if code := waiter.wait(); code != 130 {
		t.Fatalf("exit code %d, want 130; stderr:\n%s", code, waiter.stderr.String())
	}
	if !strings.Contains(waiter.stderr.String(), `interrupted by signal 2`) || waiter.stdout.String() != "" {
		t.Errorf("stdout %q; stderr:\n%s", waiter.stdout.String(), waiter.stderr.String())
	}
}

// With an explicit owner, a dlock run inside the command re-enters the lock
// (same backend through DLOCK_URL, same token).
func TestOwnerReenters(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	env := append(testEnv(t), "PATH="+filepath.Dir(dlockBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := runDlock(t, env, "run", "--url", url, "--name", "nest", "--owner", "job-42", "--",
		"sh", "-c", `echo "outer=$DLOCK_TOKEN"; dlock run --name nest --owner job-42 --wait 0 -- sh -c 'echo "inner=$DLOCK_TOKEN owner=$DLOCK_OWNER"'; dlock run --name nest --wait 0 -- true; echo "other=$?"`)
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	// The same token inside and out, whatever it is (a new SQLite file's
	// tokens start at the clock in µs).
	m := regexp.MustCompile(`^outer=([1-9][0-9]*)\ninner=([0-9]+) owner=job-42\nother=3\n$`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != m[2] {
		t.Errorf("stdout %q, want outer=T, inner=T owner=job-42, other=3; stderr:\n%s", r.stdout, r.stderr)
	}
}
