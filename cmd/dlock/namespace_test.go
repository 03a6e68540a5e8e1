//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
)

// dlock status shows a namespaced lock with its namespace, apart from the
// lock of the same-looking name without one (before, they were one lock).
func TestStatusShowsNamespaces(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	ctx := context.Background()
	for _, ns := range []string{"app", ""} {
		var opts []dlock.Option
		name := "job"
		if ns != "" {
			opts = append(opts, dlock.Namespace(ns))
		} else {
			name = "app/job"
		}
		c, err := dlock.Open(ctx, url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Mutex(name).TryLock(ctx); err != nil {
			t.Fatalf("TryLock(%q) in namespace %q: %v", name, ns, err)
		}
	}
	r := runDlock(t, nil, "status", "--url", url)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	rows := strings.Join(lines[1:], "\n") + "\n"
	if r.code != 0 || len(lines) != 3 || !strings.Contains(rows, "[app]job ") || !strings.Contains(rows, "\napp/job ") && !strings.HasPrefix(rows, "app/job ") {
		t.Fatalf("status: exit %d, want rows [app]job and app/job; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
