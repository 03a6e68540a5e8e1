//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestVerifyBackends is the CI tier of dlock verify: every backend, on a
// server of its own, under pause and kill faults of its holders and one
// network fault (a write that reaches the resource late while the
// holder's link to the store is cut). A run must find no violation of
// (a), (b) or (c), and its faults must have happened. Longer runs: see
// dlock help verify.
func TestVerifyBackends(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
		ttl  string
		dur  string
	}{
		{"redis", func(t *testing.T) string { return "redis://" + testserver.Redis(t).Addr() }, "1s", "20s"},
		{"redlock", func(t *testing.T) string {
			return "redlock://" + strings.Join(testserver.RedisN(t, 3).Addrs(), ",")
		}, "1s", "20s"},
		// A killed holder's node lives until its session times out (default
		// 30 s): a short session lets the kills show within the run.
		{"zookeeper", func(t *testing.T) string { return "zk://" + testserver.ZooKeeper(t).Addr() + "?session_timeout=4s" }, "2s", "30s"},
		{"etcd", func(t *testing.T) string { return "etcd://" + testserver.Etcd(t).Addr() + "/verify" }, "2s", "30s"},
		{"postgres", func(t *testing.T) string { return testserver.Postgres(t).TestDSN() }, "1s", "20s"},
		{"postgres-session", func(t *testing.T) string { return testserver.Postgres(t).TestDSN() + "&mode=session" }, "1s", "20s"},
		{"mysql", func(t *testing.T) string { return "mysql://root@" + testserver.MariaDB(t).Addr() + "/test" }, "1s", "20s"},
		{"mysql-session", func(t *testing.T) string {
			return "mysql://root@" + testserver.MariaDB(t).Addr() + "/test?mode=session"
		}, "1s", "20s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := runDlock(t, nil, "verify", "--url", tc.url(t), "--out", out, "--workers", "3",
				"--duration", tc.dur, "--ttl", tc.ttl, "--faults", "pause,kill,slow-write", "--seed", "11")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			res := readVerifyResult(t, out)
			if !res.Pass || res.Grants < 10 || res.Faults < 3 {
				t.Fatalf("result %+v\nstdout: %s", res, r.stdout)
			}
			t.Log(strings.TrimSpace(r.stdout))
		})
	}
}
