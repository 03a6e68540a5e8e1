//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	r := runDlock(t, nil, "status", "--url", url)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no locks held on sqlite") {
		t.Fatalf("empty: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	a, ownerA := holdLock(t, url, "app/b-lock")
	_, ownerB := holdLock(t, url, "app/a lock")
	_, ownerC := holdLock(t, url, "other")

	r = runDlock(t, nil, "status", "--url", url)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 locks:\n%s", r.stdout)
	}
	header := strings.Fields(lines[0])
	if strings.Join(header, " ") != "NAME OWNER TOKEN KIND WEIGHT HOLDS EXPIRES IN WAITERS" {
		t.Errorf("header %q", lines[0])
	}
	// Columns are aligned: every row's owner starts where the header's does.
	col := strings.Index(lines[0], "OWNER")
	for i, want := range []struct{ name, owner string }{{`"app/a lock"`, ownerB}, {"app/b-lock", ownerA}, {"other", ownerC}} {
		row := lines[i+1]
		if !strings.HasPrefix(row, want.name+" ") || !strings.HasPrefix(row[col:], want.owner+" ") {
			t.Errorf("row %d = %q, want lock %s held by %s", i+1, row, want.name, want.owner)
		}
		f := strings.Fields(row[col:])
		// A new SQLite file's tokens start at the clock in µs.
		if len(f) != 7 || !isToken(f[1]) || f[2] != "mutex" || f[3] != "1/1" || f[4] != "1" || !strings.HasSuffix(f[5], "s") || f[6] != "?" {
			t.Errorf("row %d = %q, want a token, a mutex 1/1, 1 hold, an expiry and ? waiters (sqlite does not see non-fair ones)", i+1, row)
		}
	}

	r = runDlock(t, nil, "status", "--url", url, "--prefix", "app/")
	if n := strings.Count(r.stdout, "\n"); r.code != 0 || n != 3 || strings.Contains(r.stdout, "other") {
		t.Errorf("--prefix app/: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	r = runDlock(t, nil, "status", "--url", url, "--prefix", "nomatch")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, `"nomatch"`) {
		t.Errorf("--prefix nomatch: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	a.stop()
	r = runDlock(t, nil, "status", "--url", url)
	if r.code != 0 || strings.Contains(r.stdout, "b-lock") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("after a release: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

// TestStatusWaiters checks the WAITERS column while dlock runs wait: "?"
// when the backend cannot see them all (sqlite does not register waiters
// that are not fair), "N+?" with N fair waiters queued. It showed 0.
func TestStatusWaiters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fair bool
		want string
	}{{false, "?"}, {true, "2+?"}} {
		t.Run(fmt.Sprintf("fair=%v", tc.fair), func(t *testing.T) {
			url := sqliteURL(t)
			var extra []string
			if tc.fair {
				extra = []string{"--fair"}
			}
			holdLock(t, url, "job", extra...)
			for range 2 {
				w := start(t, nil, append(append([]string{"run", "--url", url, "--name", "job"}, extra...), "--", "true")...)
				waitStderr(t, w, `waiting for lock "job"`)
			}
			r := runDlock(t, nil, "status", "--url", url)
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			if r.code != 0 || len(lines) != 2 {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if f := strings.Fields(lines[1]); f[len(f)-1] != tc.want {
				t.Errorf("WAITERS of %q is %q, want %q", lines[1], f[len(f)-1], tc.want)
			}
		})
	}
}

// isToken reports whether s is a fencing token: a whole number above 0.
func isToken(s string) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n > 0
}
