package verify

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/dlock-dev/dlock/mem"
)

// A worker that cannot be started is a clear error before the run starts,
// and nothing is left running.
func TestWorkerThatCannotStart(t *testing.T) {
	cfg := Config{
		URL: "mem://", Workers: 2, Duration: time.Second, TTL: time.Second,
		Out:     filepath.Join(t.TempDir(), "out"),
		Command: func(WorkerConfig) *exec.Cmd { return exec.Command(filepath.Join(t.TempDir(), "no-such-dlock")) },
	}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "starting worker 0") {
		t.Fatalf("Run = %v, want an error about starting worker 0", err)
	}
}

func TestSplitHosts(t *testing.T) {
	for _, tc := range []struct {
		url, head, tail string
		hosts           []string
	}{
		{"redis://127.0.0.1:6379", "redis://", "", []string{"127.0.0.1:6379"}},
		{"redlock://u:p@h1:1,h2:2/0?x=1", "redlock://u:p@", "/0?x=1", []string{"h1:1", "h2:2"}},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@", "/test?sslmode=disable", []string{"127.0.0.1:5432"}},
	} {
		head, hosts, tail, err := splitHosts(tc.url)
		if err != nil || head != tc.head || tail != tc.tail || strings.Join(hosts, ",") != strings.Join(tc.hosts, ",") {
			t.Errorf("splitHosts(%q) = %q %q %q %v", tc.url, head, hosts, tail, err)
		}
	}
	if _, _, _, err := splitHosts("redis://localhost"); err == nil {
		t.Error("an address without a port was accepted")
	}
}
