//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestRunRefusesMem: run and status refuse mem:// with a configuration
// error, since every dlock process would have its own locks. Before, both
// exited 0 and two dlock run held "the same" lock at once.
func TestRunRefusesMem(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--url", "mem://", "--name", "x", "--", "true"},
		{"status", "--url", "mem://shared"},
	} {
		r := runDlock(t, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "dlock's own process") || r.stdout != "" {
			t.Errorf("dlock %s: exit %d, stdout %q, stderr:\n%s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	env := append(testEnv(t), "DLOCK_URL=mem://")
	if r := runDlock(t, env, "run", "--name", "x", "--", "true"); r.code != exitUsage {
		t.Errorf("DLOCK_URL=mem://: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestTinyWaitOnFreeLock: --wait 1ns or 1ms on a free lock takes it, as
// flock -w does (one attempt whatever the timeout); on a held lock it
// exits 3 naming the holder. Before, the deadline cut the attempt short
// on redis and a free lock exited 3.
func TestTinyWaitOnFreeLock(t *testing.T) {
	t.Parallel()
	u := "redis://" + testserver.Redis(t).Addr()
	for _, wait := range []string{"1ns", "1ms"} {
		for i := range 3 {
			r := runDlock(t, nil, "run", "--url", u, "--name", "free", "--wait", wait, "--", "true")
			if r.code != 0 {
				t.Fatalf("--wait %s on a free lock (try %d): exit %d; stderr:\n%s", wait, i+1, r.code, r.stderr)
			}
		}
	}
	_, owner := holdLock(t, u, "held")
	r := runDlock(t, nil, "run", "--url", u, "--name", "held", "--wait", "1ms", "--", "true")
	if r.code != exitBusy || !strings.Contains(r.stderr, "gave up after --wait 1ms") || !strings.Contains(r.stderr, owner) {
		t.Errorf("--wait 1ms on a held lock: exit %d, want %d naming %s; stderr:\n%s", r.code, exitBusy, owner, r.stderr)
	}
}

// TestNoHomeIsConfigurationError: without --url, $DLOCK_URL, a state
// directory or a home, dlock cannot name its default database: exit 2,
// saying what to set. Before, exit 5 as if a backend had failed.
func TestNoHomeIsConfigurationError(t *testing.T) {
	t.Parallel()
	var env []string
	for _, kv := range testEnv(t) {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	for _, args := range [][]string{{"run", "--name", "x", "--", "true"}, {"status"}, {"migrate"}} {
		r := runDlock(t, env, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "no home directory") {
			t.Errorf("dlock %s without a home: exit %d, want %d; stderr:\n%s", args[0], r.code, exitUsage, r.stderr)
		}
	}
}

// TestForeignDataExitCode: a lock whose row dlock did not write exits 6
// with the store's explanation. Before, exit 5, "backend error".
func TestForeignDataExitCode(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	if r := runDlock(t, nil, "migrate", "--url", u); r.code != 0 {
		t.Fatalf("migrate: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", pu.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO dlock_locks (name, owner, holds, token, expires_at) VALUES
		('bad', 'x', 1, 'not-a-number', 9999999999999)`); err != nil {
		t.Fatal(err)
	}
	r := runDlock(t, nil, "run", "--url", u, "--name", "bad", "--wait", "0", "--", "true")
	if r.code != exitForeign || !strings.Contains(r.stderr, "foreign data") {
		t.Errorf("exit %d, want %d; stderr:\n%s", r.code, exitForeign, r.stderr)
	}
}

// TestReleaseFailureExitCode: when the store is gone by the time the
// command exits, the release fails: a command that succeeded makes dlock
// exit 7, one that failed keeps its status, and stderr says the release
// failed either way. Before, dlock exited 0 and the lock stayed held
// until its TTL.
func TestReleaseFailureExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		child, want int
	}{{0, exitRelease}, {9, 9}} {
		s := testserver.Redis(t)
		dir := t.TempDir()
		ready, proceed := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
		p := start(t, nil, "run", "--url", "redis://"+s.Addr(), "--name", "x", "--",
			"sh", "-c", `echo ready > "$0"; while [ ! -e "$1" ]; do sleep 0.02; done; exit `+string(rune('0'+tc.child)),
			ready, proceed)
		waitFile(t, ready, p)
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(proceed, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		code := p.wait()
		stderr := p.stderr.String()
		if code != tc.want || !strings.Contains(stderr, `releasing lock "x" failed`) {
			t.Errorf("command exit %d: dlock exit %d, want %d; stderr:\n%s", tc.child, code, tc.want, stderr)
		}
	}
}

// TestOpenContextConnectTimeout: a connect timeout of 0, from the flag or
// the URL, leaves the opening unbounded; others bound it by 30s or twice
// the timeout. Before, 0 meant a hidden bound of 30s.
func TestOpenContextConnectTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		flag optDuration
		want time.Duration // 0: no deadline
	}{
		{"redis://h?connect_timeout=0", optDuration{}, 0},
		{"redis://h", optDuration{d: 0, set: true}, 0},
		{"redis://h?connect_timeout=1m", optDuration{d: 0, set: true}, 0},
		{"redis://h", optDuration{}, openTimeout},
		{"redis://h?connect_timeout=1m", optDuration{}, 2 * time.Minute},
		{"redis://h?connect_timeout=0", optDuration{d: time.Second, set: true}, openTimeout},
	} {
		ctx, cancel := openContext(context.Background(), tc.url, tc.flag)
		dl, ok := ctx.Deadline()
		cancel()
		switch {
		case tc.want == 0 && ok:
			t.Errorf("%s, flag %v: a deadline in %v, want none", tc.url, tc.flag, time.Until(dl))
		case tc.want != 0 && (!ok || time.Until(dl) > tc.want || time.Until(dl) < tc.want-time.Minute/2):
			t.Errorf("%s, flag %v: deadline %v (%v), want about %v", tc.url, tc.flag, time.Until(dl), ok, tc.want)
		}
	}
}

// TestHelpColumns: in dlock help and each command's help, the flags'
// descriptions start in one column, continuation lines under them, and no
// line is wider than 80 columns. Before, --connect-timeout D pushed its
// description out of the column, and long lines ran past 80.
func TestHelpColumns(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"help", "run"}, {"help", "status"}, {"help", "migrate"}, {"help", "verify"}, {"help", "bench"}} {
		r := runDlock(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("dlock %q: exit %d", args, r.code)
		}
		col := -1
		inFlags := false
		for i, line := range strings.Split(r.stdout, "\n") {
			if n := len([]rune(line)); n > 80 {
				t.Errorf("dlock %q line %d is %d columns wide: %q", args, i+1, n, line)
			}
			switch {
			case line == "Flags:":
				inFlags = true
			case inFlags && line == "":
				inFlags = false
			case inFlags && strings.HasPrefix(line, "  -"):
				name, _, _ := strings.Cut(strings.TrimPrefix(line, "  "), "  ")
				at := 2 + len(name) + len(line[2+len(name):]) - len(strings.TrimLeft(line[2+len(name):], " "))
				if col < 0 {
					col = at
				}
				if at != col {
					t.Errorf("dlock %q: the description of %s starts at column %d, others at %d", args, name, at, col)
				}
			case inFlags:
				if at := len(line) - len(strings.TrimLeft(line, " ")); at != col {
					t.Errorf("dlock %q line %d: continuation at column %d, the descriptions at %d: %q", args, i+1, at, col, line)
				}
			}
		}
	}
}
