package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKilledRunTakesItsCommandAlong kills dlock run with SIGKILL (as the
// OOM killer would) while its command runs with a child of its own. Before
// the lock can be granted again, both must be gone, and nothing may be left
// in the command's process group. Before the guard and PR_SET_PDEATHSIG,
// both ran on and a second dlock run got the lock once the TTL had passed.
func TestKilledRunTakesItsCommandAlong(t *testing.T) {
	u := sqliteURL(t)
	pids := filepath.Join(t.TempDir(), "pids")
	// The command writes its pid, its child's and its process group.
	p := start(t, nil, "run", "--url", u, "--name", "job", "--ttl", "1s", "--",
		"sh", "-c", `sleep 1000 & echo "$$ $! $(cut -d' ' -f5 /proc/$$/stat)" > "$0"; wait`, pids)
	f := strings.Fields(waitFile(t, pids, p))
	if len(f) != 3 {
		t.Fatalf("pids file: %q", f)
	}
	child, grandchild, pgid := f[0], f[1], f[2]
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait()

	// The next holder's command reports which of them still run (zombies,
	// which init may reap late, count as gone).
	alive := `for p in "$@"; do if [ -e /proc/$p/stat ] && ! grep -q ') Z' /proc/$p/stat; then echo "$p"; fi; done`
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := runDlock(t, nil, "run", "--url", u, "--name", "job", "--wait", "0", "--", "sh", "-c", alive, "sh", child, grandchild)
		if r.code == 0 {
			if r.stdout != "" {
				t.Fatalf("the lock was granted again while these of the killed run's processes ran: %q (child %s, grandchild %s)", r.stdout, child, grandchild)
			}
			break
		}
		if r.code != 3 {
			t.Fatalf("second dlock run: exit %d; stderr:\n%s", r.code, r.stderr)
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock was not granted again within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left := groupMembers(t, pgid); len(left) > 0 {
		t.Errorf("processes %v of the killed run's process group %s are left", left, pgid)
	}
}

// groupMembers returns the pids of the live (not zombie) processes in
// process group pgid.
func groupMembers(t *testing.T, pgid string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// After the command name in parentheses: state, ppid, pgrp.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == pgid {
			out = append(out, pid)
		}
	}
	return out
}
