//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestExitStatusPassthrough(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := runDlock(t, nil, "run", "--name", "x", "--", "sh", "-c", tc.script)
			if r.code != tc.want {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", r.code, tc.want, r.stderr)
			}
			if tc.want < 128 && r.stderr != "" {
				t.Errorf("unexpected stderr:\n%s", r.stderr)
			}
		})
	}
}

func TestChildEnvironmentAndStdio(t *testing.T) {
	t.Parallel()
	p := startIn(t, nil, strings.NewReader("hello\n"), "run", "--name", "jobs/nightly", "--",
		"sh", "-c", `read line; echo "in=$line name=$DLOCK_NAME token=$DLOCK_TOKEN owner=$DLOCK_OWNER url=$DLOCK_URL"; echo err >&2`)
	r := result{code: p.wait(), stdout: p.stdout.String(), stderr: p.stderr.String()}
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	f := fields(r.stdout)
	if f["in"] != "hello" || f["name"] != "jobs/nightly" || !strings.HasPrefix(f["url"], "sqlite://") {
		t.Errorf("child saw %q", r.stdout)
	}
	if tok, err := strconv.ParseUint(f["token"], 10, 64); err != nil || tok == 0 {
		t.Errorf("DLOCK_TOKEN = %q, want a positive number", f["token"])
	}
	host, _ := os.Hostname()
	if !strings.HasPrefix(f["owner"], host+"/") {
		t.Errorf("DLOCK_OWNER = %q, want host/pid/random", f["owner"])
	}
	if r.stderr != "err\n" {
		t.Errorf("stderr = %q, want the child's", r.stderr)
	}
}

// fields parses "k=v k=v" on one line.
func fields(s string) map[string]string {
	m := make(map[string]string)
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
