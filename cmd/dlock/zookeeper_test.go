//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
)

// TestZooKeeperKilledHolderFreesAtTTL: a dlock run --ttl 4s holder on
// ZooKeeper killed with SIGKILL keeps the lock as long as its session, so
// dlock opens the session with a timeout of --ttl: a second dlock run
// waiting for the lock is granted long before the default session timeout
// (30s), which is what a dead holder cost before. The command still gets
// the user's URL in DLOCK_URL, without the session_timeout dlock added.
func TestZooKeeperKilledHolderFreesAtTTL(t *testing.T) {
	t.Parallel()
	u := "zk://" + testserver.ZooKeeper(t).Addr()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	holder := start(t, nil, "run", "--url", u, "--ttl", "4s", "--name", "job", "--",
		"sh", "-c", `echo "$DLOCK_URL" > "$0"; sleep 1000`, ready)
	if got := strings.TrimSpace(waitFile(t, ready, holder)); got != u {
		t.Errorf("DLOCK_URL = %q, want the URL given, %q", got, u)
	}
	waiter := start(t, nil, "run", "--url", u, "--name", "job", "--", "true")
	waitStderr(t, waiter, "waiting for lock")
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	holder.wait()
	if code := waiter.wait(); code != 0 {
		t.Fatalf("the waiting dlock run: exit %d; stderr:\n%s", code, waiter.stderr.String())
	}
	if took := time.Since(killed); took >= zookeeper.DefaultSessionTimeout {
		t.Errorf("the lock of a holder killed with --ttl 4s was granted again %v later, not before the default session timeout %v", took, zookeeper.DefaultSessionTimeout)
	}
}

// TestZooKeeperSessionRefusals: a --ttl below the servers' minimum
// session timeout (5s here) is refused with exit 2 and says what the
// servers grant, since a dead dlock would keep the lock longer than --ttl;
// a URL with a session_timeout of its own keeps it and is not refused;
// --min-hold, which needs a lock that outlives its client, is refused with
// exit 2.
func TestZooKeeperSessionRefusals(t *testing.T) {
	t.Parallel()
	u := "zk://" + testserver.ZooKeeper(t, testserver.WithZooConfig("minSessionTimeout", "5000")).Addr()
	r := runDlock(t, nil, "run", "--url", u, "--ttl", "3s", "--name", "short", "--", "sh", "-c", "echo ran")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "--ttl 3s is below the shortest session timeout") ||
		!strings.Contains(r.stderr, "5s") {
		t.Errorf("--ttl 3s on ZooKeeper with minSessionTimeout 5s: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = runDlock(t, nil, "hold", "--url", u, "--ttl", "3s", "short")
	if r.code != exitUsage || !strings.Contains(r.stderr, "below the shortest session timeout") {
		t.Errorf("hold --ttl 3s: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	r = runDlock(t, nil, "run", "--url", u+"?session_timeout=6s", "--ttl", "3s", "--name", "short", "--", "sh", "-c", "echo ran")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "ran" {
		t.Errorf("--ttl 3s with session_timeout=6s in the URL: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = runDlock(t, nil, "run", "--url", u, "--min-hold", "1s", "--name", "cron", "--", "sh", "-c", "echo ran")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "MinHold") {
		t.Errorf("--min-hold on ZooKeeper: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
