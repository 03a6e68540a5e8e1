package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/opentest"
)

// TestConnectTimeout: the commands that open a backend take
// --connect-timeout, which replaces the URL's connect_timeout, and a
// backend that cannot be reached gets one line on stderr saying why, and
// exit 5. Before, a zk:// URL at a port that is not ZooKeeper held dlock
// for its 30 s open limit and the flag did not exist.
func TestConnectTimeout(t *testing.T) {
	silent := opentest.Silent(t)
	refused := opentest.ClosedPort(t)
	for _, tc := range []struct {
		args   []string
		reason string
	}{
		{[]string{"status", "--url", "zk://" + silent + "?connect_timeout=1m", "--connect-timeout", "500ms"}, "within connect_timeout 500ms"},
		{[]string{"run", "--url", "mysql://root@" + silent + "/test?timeout=1m", "--connect-timeout", "1", "--name", "x", "--", "true"}, "within connect_timeout 1s"},
		{[]string{"migrate", "--url", "etcd://" + silent + "?dial-timeout=1m", "--connect-timeout", "500ms"}, "within connect_timeout 500ms"},
		{[]string{"run", "--url", "redis://" + refused, "--name", "x", "--", "true"}, "connection refused"},
	} {
		start := time.Now()
		r := runDlock(t, nil, tc.args...)
		took := time.Since(start)
		t.Logf("dlock %q: exit %d after %v; stderr:\n%s", tc.args, r.code, took.Round(time.Millisecond), r.stderr)
		if r.code != exitBackend {
			t.Errorf("exit %d, want %d", r.code, exitBackend)
		}
		if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 {
			t.Errorf("%d lines on stderr, want one", len(lines))
		}
		if !strings.Contains(r.stderr, tc.reason) || strings.Count(r.stderr, "backend unavailable") != 1 {
			t.Errorf("stderr does not say %q, with \"backend unavailable\" once", tc.reason)
		}
		if took > 15*time.Second {
			t.Errorf("took %v", took)
		}
	}
	// --verbose shows go-redis's lines, through the CLI's slog handler.
	r := runDlock(t, nil, "status", "--url", "redis://"+refused, "--verbose")
	if !strings.Contains(r.stderr, `level=DEBUG msg="redis: `) || strings.Contains(r.stderr, "pool.go") {
		t.Errorf("--verbose: want go-redis's lines as slog records; stderr:\n%s", r.stderr)
	}
	r = runDlock(t, nil, "status", "--url", "zk://"+silent, "--connect-timeout", "soon")
	if r.code != exitUsage {
		t.Errorf("--connect-timeout soon: exit %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
	}
}
