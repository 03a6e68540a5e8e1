package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// TestExamples builds each example and runs it against real servers
// started on free ports, checking what it prints.
func TestExamples(t *testing.T) {
	redis := testserver.Redis(t)
	pg := testserver.Postgres(t)
	bin := t.TempDir()
	run := func(t *testing.T, name string, env []string, want ...string) {
		t.Helper()
		exe := filepath.Join(bin, name)
		if out, err := exec.Command("go", "build", "-o", exe, "./"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build ./%s: %v\n%s", name, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s printed:\n%s\nwant a line with %q", name, out, w)
			}
		}
	}
	redisURL := "DLOCK_URL=redis://" + redis.Addr()
	t.Run("cronjob", func(t *testing.T) {
		run(t, "cronjob", []string{redisURL}, "running the job with token", "done")
		// Within MinHold the name stays taken: the same job elsewhere skips.
		run(t, "cronjob", []string{redisURL}, "skipped: another host runs it")
	})
	t.Run("workerpool", func(t *testing.T) {
		run(t, "workerpool", []string{redisURL}, "rendered 8 reports, at most 3 at once")
	})
	t.Run("fencedwrite", func(t *testing.T) {
		run(t, "fencedwrite", []string{"DATABASE_URL=" + pg.TestDSN()},
			"stale write refused: true", "second token above the first: true", "balance: 30")
	})
	t.Run("existingclient", func(t *testing.T) {
		run(t, "existingclient", []string{"REDIS_ADDR=" + redis.Addr()}, "with a token: true", "the program's client still works: true")
	})
	t.Run("metrics", func(t *testing.T) {
		run(t, "metrics", []string{redisURL},
			`dlock_lock_acquisitions_total{backend="redis",kind="mutex",outcome="granted"} 2`,
			`dlock_lock_acquisitions_total{backend="redis",kind="mutex",outcome="busy"} 1`)
	})
}
