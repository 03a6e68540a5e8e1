//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A signal sent to dlock reaches the command's whole process group, and
// dlock exits with the command's status.
func TestSignalsAreForwarded(t *testing.T) {
	t.Parallel()
	// Under nohup the test inherits SIGHUP ignored, and so would dlock
	// (TestIgnoredSignalsStayIgnored checks that it keeps it so). Catching
	// SIGHUP here makes the children start with the default disposition.
	if signal.Ignored(syscall.SIGHUP) {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGHUP)
		defer signal.Stop(c)
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		// grandchild: the check includes a background grandchild (sh starts
		// background jobs with SIGINT ignored, so not for INT).
		grandchild bool
	}{
		{syscall.SIGTERM, "TERM", true},
		{syscall.SIGHUP, "HUP", true},
		{syscall.SIGINT, "INT", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ready, mark, grand := filepath.Join(dir, "ready"), filepath.Join(dir, "mark"), filepath.Join(dir, "grand")
			// The command starts a grandchild in its group; both trap the
			// signal and record it.
			script := `trap 'echo child >> "$1"; exit 9' ` + tc.name + `
sh -c 'trap "echo grandchild >> \"\$1\"; exit 0" ` + tc.name + `; echo $$ > "$2"; while :; do sleep 0.05; done' sh "$1" "$2" >/dev/null 2>&1 &
while [ ! -s "$2" ]; do sleep 0.01; done
echo ready > "$3"
while :; do sleep 0.05; done`
			p := start(t, nil, "run", "--name", "x", "--", "sh", "-c", script, "sh", mark, grand, ready)
			waitFile(t, ready, p)
			t.Cleanup(func() { // in case the grandchild survives a failure
				if b, err := os.ReadFile(grand); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			p.cmd.Process.Signal(tc.sig)
			if code := p.wait(); code != 9 {
				t.Fatalf("exit code %d, want the child's 9; stderr:\n%s", code, p.stderr.String())
			}
			want := []string{"child\n"}
			if tc.grandchild {
				want = append(want, "grandchild\n")
			}
			// The grandchild may still be handling the signal.
			deadline := time.Now().Add(10 * time.Second)
			for {
				b, _ := os.ReadFile(mark)
				n := 0
				for _, w := range want {
					if strings.Contains(string(b), w) {
						n++
					}
				}
				if n == len(want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("marks = %q, want %q", b, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// The command runs in a process group of its own.
func TestCommandHasItsOwnProcessGroup(t *testing.T) {
	t.Parallel()
	r := runDlock(t, nil, "run", "--name", "x", "--", "sh", "-c", `ps -o pid= -o pgid= -p $$`)
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 2 {
		t.Skipf("ps: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	if f[0] != f[1] {
		t.Errorf("command pid %s, pgid %s: not the leader of its own group", f[0], f[1])
	}
	if pg, _ := strconv.Atoi(f[1]); pg == syscall.Getpgrp() {
		t.Errorf("command is in the test's process group")
	}
}

// A signal ignored when dlock starts (nohup) stays ignored by dlock and
// by the command.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	t.Parallel()
	p := startProg(t, nil, nil, "sh", "-c", `trap "" HUP; exec "$0" "$@"`, dlockBin,
		"run", "--name", "x", "--", "sh", "-c", `kill -HUP $PPID; kill -HUP $$; sleep 0.2; echo survived`)
	if code := p.wait(); code != 0 || p.stdout.String() != "survived\n" {
		t.Fatalf("exit code %d, stdout %q; stderr:\n%s", code, p.stdout.String(), p.stderr.String())
	}
}
