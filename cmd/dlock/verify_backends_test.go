//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
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
	t.Parallel()
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
			// Each run waits on its own server and processes most of the
			// time; two at once halve the package's time in CI.
			t.Parallel()
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

// TestVerifyLocalServerCut: dlock verify runs a 3-node ZooKeeper ensemble
// and etcd cluster, each member in a network namespace of its own, and
// cuts the leader off the network (from the other members and from the
// clients) for longer than the session or lease while locks are held;
// the promise holds. Afterwards no namespace or bridge of the run is left.
func TestVerifyLocalServerCut(t *testing.T) {
	t.Parallel()
	if err := testserver.CanIsolate(); err != nil {
		t.Skipf("server-cut is not applicable here: %v", err)
	}
	for _, kind := range []string{"zookeeper", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testserver.Require(t, testserver.Kind(kind))
			out := filepath.Join(t.TempDir(), "out")
			r := runDlock(t, nil, "verify", "--local", kind, "--out", out, "--workers", "3",
				"--duration", "20s", "--ttl", "2s", "--faults", "server-cut", "--seed", "3")
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			res := readVerifyResult(t, out)
			if !res.Pass || res.Faults < 1 {
				t.Fatalf("result %+v\nstdout: %s", res, r.stdout)
			}
			b, err := os.ReadFile(filepath.Join(out, "history", "faults.json"))
			if err != nil {
				t.Fatal(err)
			}
			var faults []struct {
				Kind, Label string
				Start, End  int64
			}
			if err := json.Unmarshal(b, &faults); err != nil {
				t.Fatal(err)
			}
			if len(faults) == 0 || faults[0].Kind != "server-cut" || !strings.HasPrefix(faults[0].Label, "the leader (") ||
				!strings.Contains(faults[0].Label, "cut off") {
				t.Fatalf("the first fault is not a labelled cut of the leader: %s", b)
			}
			// Grants before the cut and after it began: the majority
			// elected a new leader and granted again.
			before, during, after := 0, 0, 0
			files, _ := filepath.Glob(filepath.Join(out, "history", "worker-*.jsonl"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					var e struct {
						T         int64
						Op, Phase string
					}
					if json.Unmarshal([]byte(line), &e) != nil || e.Op != "acquire" || e.Phase != "ok" {
						continue
					}
					switch {
					case e.T < faults[0].Start:
						before++
					case e.T < faults[0].End:
						during++
					default:
						after++
					}
				}
			}
			t.Logf("grants: %d before the leader was cut off, %d in the fault window, %d after", before, during, after)
			if before == 0 || during+after == 0 {
				t.Fatalf("want grants before the cut and after it began; stdout: %s", r.stdout)
			}
			// The members' addresses: 10.a.b.11, ... on the run's bridge.
			var cfg struct {
				URL string `json:"url"`
			}
			b, _ = os.ReadFile(filepath.Join(out, "result.json"))
			json.Unmarshal(b, &cfg)
			host, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(cfg.URL, "zk://"), "etcd://"), ":")
			subnet := host[:strings.LastIndex(host, ".")+1]
			if !strings.HasPrefix(subnet, "10.") {
				t.Fatalf("the members are not on a bridge of their own: %s", cfg.URL)
			}
			addrs, _ := exec.Command("ip", "-4", "-o", "addr").Output()
			if strings.Contains(string(addrs), " "+subnet+"1/24") {
				t.Fatalf("the run's bridge (%s1) is left after dlock verify exited:\n%s", subnet, addrs)
			}
			t.Log(strings.TrimSpace(r.stdout))
		})
	}
}
