//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // to reach into the sqlite backend's file as another process would
)

// Tests of a lease lost while the command runs, for real causes: another
// party takes the lock over in the database, or the database cannot be
// written until the lease runs out. The command is sent SIGTERM (SIGKILL
// after --grace) and dlock exits 4 naming the lock and the cause.

// lossCase starts a dlock run with a short TTL (long enough for renewals
// on a loaded machine) whose command records SIGTERM in a file (or ignores
// it), waits until the command runs, and returns the process, the
// database and the mark file.
func lossCase(t *testing.T, ignoreTERM bool, extra ...string) (p *proc, db *sql.DB, marks string) {
	t.Helper()
	u := sqliteURL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready, marks := filepath.Join(dir, "ready"), filepath.Join(dir, "marks")
	trap := `trap 'echo TERM >> "$0"; exit 0' TERM`
	if ignoreTERM {
		trap = `trap '' TERM`
	}
	args := append([]string{"run", "--url", u + "?busy_timeout=100ms", "--name", "job", "--ttl", "1s"}, extra...)
	args = append(args, "--", "sh", "-c", trap+`; echo ready > "$1"; while :; do sleep 0.05; done`, marks, ready)
	p = start(t, nil, args...)
	waitFile(t, ready, p)
	// A busy timeout: the test's write must wait out a renewal that holds
	// the database's write lock (SQLITE_BUSY at once, under load).
	db, err = sql.Open("sqlite", "file:"+(&url.URL{Path: pu.Path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return p, db, marks
}

func checkLost(t *testing.T, p *proc, marks string, want ...string) {
	t.Helper()
	if code := p.wait(); code != 4 {
		t.Fatalf("exit code %d, want 4; stderr:\n%s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, w := range append([]string{`lock "job"`, "sqlite", "lease lost", `lost lock "job" while sh was running`}, want...) {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not contain %q:\n%s", w, stderr)
		}
	}
	if marks != "" {
		if b, _ := os.ReadFile(marks); string(b) != "TERM\n" {
			t.Errorf("the command recorded %q, want TERM", b)
		}
	}
}

// Another party takes the lock over: the next renewal finds the row
// changed.
func TestLeaseLostToAnotherOwner(t *testing.T) {
	p, db, marks := lossCase(t, false)
	res, err := db.Exec(`UPDATE dlock_locks SET owner = 'thief', token = token + 1 WHERE name = 'job'`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("updated %d rows", n)
	}
	checkLost(t, p, marks, `held by "thief"`, "exited with status 0")
}

// The database cannot be written (another connection holds its write lock)
// until the lease runs out.
func TestLeaseLostToAnUnwritableStore(t *testing.T) {
	t.Parallel()
	p, db, marks := lossCase(t, false)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	checkLost(t, p, marks, "validity deadline passed without a successful renewal")
}

// A command that ignores SIGTERM is killed after --grace.
func TestLeaseLostCommandKilledAfterGrace(t *testing.T) {
	p, db, _ := lossCase(t, true, "--grace", "300ms")
	if _, err := db.Exec(`UPDATE dlock_locks SET owner = 'thief', token = token + 1 WHERE name = 'job'`); err != nil {
		t.Fatal(err)
	}
	checkLost(t, p, "", "did not exit within --grace 300ms; sending SIGKILL", "killed by signal 9")
}

// The lease is taken over while the command runs, and the command exits
// before a renewal notices: the loss shows only at the release. The hold
// was not continuous, so dlock exits 4, not with the command's status.
func TestLeaseLostFoundAtUnlock(t *testing.T) {
	t.Parallel()
	u := sqliteURL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	// A TTL of 1m renews every 20s: the command is long gone by then.
	p := start(t, nil, "run", "--url", u, "--name", "job", "--ttl", "1m", "--",
		"sh", "-c", `echo ready > "$0"; while [ ! -e "$1" ]; do sleep 0.02; done`, ready, goOn)
	waitFile(t, ready, p)
	db, err := sql.Open("sqlite", pu.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE dlock_locks SET owner = 'thief', token = token + 1 WHERE name = 'job'`); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 4 {
		t.Fatalf("exit code %d, want 4; stderr:\n%s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, w := range []string{`lock "job"`, "lease lost", `lost lock "job" before sh's release`, "exit status 4"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not contain %q:\n%s", w, stderr)
		}
	}
}
