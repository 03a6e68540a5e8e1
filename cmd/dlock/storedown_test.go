package main

import (
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testserver"
)

// A run that waits for a held lock and whose store dies meanwhile exits 5
// (the backend does not answer) when --wait runs out, not 3 ("busy")
// quoting the holder it saw before the store died: a caller that skips its
// work on 3 must not skip it because the store is down.
func TestWaitOnAStoreThatDiedExits5(t *testing.T) {
	t.Parallel()
	srv := testserver.Redis(t)
	url := "redis://" + srv.Addr()
	holdLock(t, url, "dies")
	waiter := start(t, nil, "run", "--url", url, "--name", "dies", "--wait", "6s", "--", "sh", "-c", "echo ran")
	waitStderr(t, waiter, "waiting for lock")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	code := waiter.wait()
	stderr := waiter.stderr.String()
	if code != exitBackend {
		t.Fatalf("exit code %d, want %d (backend unavailable); stderr:\n%s", code, exitBackend, stderr)
	}
	if out := waiter.stdout.String(); out != "" {
		t.Errorf("the command ran: %q", out)
	}
	if last := lastLine(stderr); !strings.Contains(last, "backend unavailable") {
		t.Errorf("the last line does not say the backend is unavailable: %s", last)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
