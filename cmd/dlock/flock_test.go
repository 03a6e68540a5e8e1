//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runFlock runs util-linux's flock(1) with args and returns its outcome.
func runFlock(t *testing.T, args ...string) result {
	t.Helper()
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) on this machine")
	}
	p := startProg(t, os.Environ(), nil, flock, args...)
	code := p.wait()
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// TestFlockSideBySide runs the same invocations through flock(1), on a
// file, and dlock run, on a lock of the file's path as its name, both
// held by another process where the case says, and compares exit codes and
// whether stderr is silent.
func TestFlockSideBySide(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "job.lock")
	u := sqliteURL(t)
	env := testEnv(t, "DLOCK_URL="+u)
	type tc struct {
		name   string
		args   []string // after the program: FILE stands for the lock
		held   bool
		code   int
		silent bool
	}
	cases := []tc{
		{"free, exit passed through", []string{"FILE", "sh", "-c", "exit 9"}, false, 9, true},
		{"-c through the shell", []string{"FILE", "-c", "exit 7"}, false, 7, true},
		{"killed by SIGTERM", []string{"FILE", "sh", "-c", "kill -TERM $$"}, false, 143, true},
		{"-E out of range", []string{"-E", "300", "FILE", "true"}, false, 64, false},
		{"-E not a number", []string{"-E", "abc", "FILE", "true"}, false, 64, false},
		{"-c with a command", []string{"FILE", "-c", "true", "extra"}, false, 64, false},
		{"-n busy", []string{"-n", "FILE", "true"}, true, 1, true},
		{"--nonblock busy", []string{"--nonblock", "FILE", "true"}, true, 1, true},
		{"--nb busy -E 7", []string{"--nb", "-E", "7", "FILE", "true"}, true, 7, true},
		{"-w fraction busy", []string{"-w", "0.3", "FILE", "true"}, true, 1, true},
		{"--timeout busy", []string{"--timeout", "0.2", "--conflict-exit-code", "0", "FILE", "true"}, true, 0, true},
		{"--verbose -n busy", []string{"--verbose", "-n", "FILE", "true"}, true, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := func(name string) []string {
				out := make([]string, len(c.args))
				for i, a := range c.args {
					out[i] = strings.ReplaceAll(a, "FILE", name)
				}
				return out
			}
			if c.held {
				fh := startProg(t, os.Environ(), nil, "flock", file, "sleep", "60")
				dh, _ := holdLock(t, u, file)
				waitHeldByFlock(t, file, fh)
				// SIGTERM, not SIGKILL: dlock run then releases, and the
				// next case does not wait for this hold's TTL (a killed
				// holder's lock outlived two later cases' 30 s waits).
				defer func() {
					dh.cmd.Process.Signal(syscall.SIGTERM)
					dh.wait()
				}()
				defer fh.cmd.Process.Kill()
			}
			fr := runFlock(t, sub(file)...)
			p := start(t, env, append([]string{"run"}, sub(file)...)...)
			dr := result{code: p.wait(), stdout: p.stdout.String(), stderr: p.stderr.String()}
			if fr.code != c.code {
				t.Errorf("flock exit %d, want %d (the test's premise); stderr %q", fr.code, c.code, fr.stderr)
			}
			if dr.code != fr.code {
				t.Errorf("dlock run exit %d, flock %d; dlock stderr:\n%s", dr.code, fr.code, dr.stderr)
			}
			if (fr.stderr == "") != c.silent || (dr.stderr == "") != c.silent {
				t.Errorf("silent on stderr: flock %v (%q), dlock %v (%q); want %v", fr.stderr == "", fr.stderr, dr.stderr == "", dr.stderr, c.silent)
			}
			if c.name == "--verbose -n busy" && !strings.Contains(dr.stderr, "failed to get lock") {
				t.Errorf("dlock --verbose does not say flock's line: %q", dr.stderr)
			}
		})
	}
}

// waitHeldByFlock waits until flock(1) holds file.
func waitHeldByFlock(t *testing.T, file string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command("flock", "-n", file, "true").Run() == nil {
		if time.Now().After(deadline) {
			t.Fatal("flock did not take the file within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFlockDeviations: -n with -w is refused (flock lets -n win), and
// --name keeps dlock's own exit codes (3 busy, 2 usage).
func TestFlockDeviations(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	_, _ = holdLock(t, u, "d")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-n", "-w", "1", "d", "true"}, 64, "-n and -w together"},
		{[]string{"--name", "d", "-n", "--", "true"}, 3, "not acquired"},
		{[]string{"--name", "d", "-E", "9", "-n", "--", "true"}, 9, "not acquired"},
		{[]string{"--name", "d", "-E", "256", "--", "true"}, 2, "out of range"},
		{[]string{"d"}, 64, "no command to run"},
		{[]string{"free", "no-such-command-x"}, 69, "no-such-command-x"},
	} {
		r := runDlock(t, nil, append([]string{"run", "--url", u}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("dlock run %q: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
}

// TestHoldAndForceRelease: dlock hold prints its token; release --force
// says who held it, asks, releases when told yes, and the next grant's
// token is higher; a free name is reported and nothing changes.
func TestHoldAndForceRelease(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	h := start(t, nil, "hold", "--url", u, "stuck")
	waitStderr(t, h, "holding lock")
	// The token goes to stdout, a pipe read apart from stderr's: wait for
	// its line too.
	for deadline := time.Now().Add(30 * time.Second); !strings.HasSuffix(h.stdout.String(), "\n") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	tok, err := strconv.ParseUint(strings.TrimSpace(h.stdout.String()), 10, 64)
	if err != nil {
		t.Fatalf("hold printed %q, want a token", h.stdout.String())
	}
	no := startIn(t, nil, strings.NewReader("n\n"), "release", "--url", u, "--force", "stuck")
	if code := no.wait(); code != 1 || !strings.Contains(no.stderr.String(), "not confirmed") {
		t.Fatalf("declined release: exit %d, stderr %q", code, no.stderr.String())
	}
	if r := runDlock(t, nil, "run", "--url", u, "-n", "stuck", "true"); r.code != 1 {
		t.Fatalf("after a declined release the lock is not held: run -n exit %d", r.code)
	}
	r := runDlock(t, nil, "release", "--url", u, "--force", "--yes", "stuck")
	if r.code != 0 || !strings.Contains(r.stderr, "held by") || !strings.Contains(r.stderr, "token "+strconv.FormatUint(tok, 10)) {
		t.Fatalf("release: exit %d, stderr %q", r.code, r.stderr)
	}
	if code := h.wait(); code != 4 {
		t.Errorf("the released holder exited %d, want 4 (lease lost); stderr:\n%s", code, h.stderr.String())
	}
	r = runDlock(t, nil, "run", "--url", u, "stuck", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	next, _ := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
	if r.code != 0 || next <= tok {
		t.Errorf("next grant: exit %d, token %d; want above %d", r.code, next, tok)
	}
	r = runDlock(t, nil, "release", "--url", u, "--force", "--yes", "stuck")
	if r.code != 1 || !strings.Contains(r.stderr, "not held; nothing released") {
		t.Errorf("release of a free name: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runDlock(t, nil, "release", "--url", u, "stuck"); r.code != 2 || !strings.Contains(r.stderr, "--force is required") {
		t.Errorf("release without --force: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	_, owner, token := holdLockToken(t, u, "j")
	r := runDlock(t, nil, "status", "--url", u, "--json")
	var got []jsonInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v; stdout %q", r.code, err, r.stdout)
	}
	if len(got) != 1 || got[0].Name != "j" || got[0].Owner != owner || got[0].Token != token || got[0].Kind != "mutex" || got[0].Foreign {
		t.Errorf("status --json = %+v", got)
	}
}

// TestStatusWatchLines: off a terminal, status --watch prints a line per
// change of the name.
func TestStatusWatchLines(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	w := start(t, nil, "status", "--url", u, "--watch", "wj")
	waitStdout(t, w, "wj: free")
	h, owner := holdLock(t, u, "wj")
	waitStdout(t, w, "wj: held by \""+owner)
	h.stop()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(w.stdout.String(), "wj: free") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(w.stdout.String(), "wj: free"); n != 2 {
		t.Errorf("want free, held, free; got:\n%s", w.stdout.String())
	}
}

func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	v := runDlock(t, nil, "version")
	vv := runDlock(t, nil, "--version")
	if v.code != 0 || vv.stdout != v.stdout || !strings.HasPrefix(v.stdout, "dlock ") {
		t.Errorf("version %q (%d), --version %q", v.stdout, v.code, vv.stdout)
	}
	// The revision is the build's own, as go version -m reads it.
	if out, err := exec.Command("go", "version", "-m", dlockBin).Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
				if rev := strings.TrimPrefix(f[1], "vcs.revision="); !strings.Contains(v.stdout, rev) {
					t.Errorf("version %q does not name revision %s", v.stdout, rev)
				}
			}
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runDlock(t, nil, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "release") || !strings.Contains(r.stdout, "nonblock") {
			t.Errorf("completion %s: exit %d, %q", sh, r.code, r.stdout)
		}
		if sh == "bash" {
			check := exec.Command("bash", "-n")
			check.Stdin = strings.NewReader(r.stdout)
			if out, err := check.CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v %s", err, out)
			}
		}
	}
	if r := runDlock(t, nil, "completion", "tcsh"); r.code != 2 || !strings.Contains(r.stderr, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %q", r.code, r.stderr)
	}
	h := runDlock(t, nil, "help")
	for _, want := range []string{"Locks:", "Leader election:", "e.g. dlock run -n", "e.g. dlock release --force"} {
		if !strings.Contains(h.stdout, want) {
			t.Errorf("dlock help lacks %q", want)
		}
	}
}

// waitStdout waits until p's stdout contains s.
func waitStdout(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stdout.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("stdout lacks %q after 30s:\n%s\nstderr:\n%s", s, p.stdout.String(), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
