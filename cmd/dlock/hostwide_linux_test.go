package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostWideRecipe follows the steps that 'dlock help run' gives for a
// lock shared by every user of the host, in a temporary directory instead
// of /var/lib/dlock, and checks that root and nobody exclude each other
// through it, each way round. The default database is per user (root under
// sudo and a user never excluded each other although the help promised a
// lock for "the processes of one host"); the help now says so and shows
// this.
func TestHostWideRecipe(t *testing.T) {
	t.Parallel()
	help := runDlock(t, nil, "help", "run")
	if strings.Contains(help.stdout, "coordinates the processes of one") {
		t.Errorf("dlock help run still promises the default database to all processes of a host:\n%s", help.stdout)
	}
	var steps []string
	for _, line := range strings.Split(help.stdout, "\n") {
		if s, ok := strings.CutPrefix(line, "    sudo "); ok {
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("dlock help run shows no steps for a host-wide lock:\n%s", help.stdout)
	}
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	base, err := os.MkdirTemp("", "dlock-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	// nobody must reach the shared directory and the binary.
	for _, d := range []string{base, filepath.Dir(dlockBin)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Join(base, "var/lib/dlock")
	for _, s := range steps {
		s = strings.ReplaceAll(s, "/var/lib/dlock", shared)
		if rest, ok := strings.CutPrefix(s, "dlock "); ok {
			s = dlockBin + " " + rest
		}
		if out, err := exec.Command("sh", "-c", s).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", s, err, out)
		}
	}
	u := "sqlite://" + shared + "/locks.db"
	root := []string{}
	nobody := []string{setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"}
	for _, tc := range []struct {
		name           string
		holder, second []string
	}{{"root holds", root, nobody}, {"nobody holds", nobody, root}} {
		t.Run(tc.name, func(t *testing.T) {
			ready := filepath.Join(shared, "ready")
			os.Remove(ready)
			h := runAs(t, tc.holder, "run", "--url", u, "--name", "job", "--",
				"sh", "-c", `echo "$DLOCK_OWNER" > "$0"; while :; do sleep 0.05; done`, ready)
			waitFile(t, ready, h)
			p := runAs(t, tc.second, "run", "--url", u, "--name", "job", "--wait", "0", "--", "echo", "ran")
			if code := p.wait(); code != 3 || !strings.Contains(p.stderr.String(), "not acquired") {
				t.Errorf("the other user's dlock run: exit %d, stdout %q, stderr:\n%s", code, p.stdout.String(), p.stderr.String())
			}
			h.stop()
		})
	}
}

// runAs starts dlock with args under the command prefix (setpriv ...), or
// as the test's user if prefix is empty.
func runAs(t *testing.T, prefix []string, args ...string) *proc {
	t.Helper()
	if len(prefix) == 0 {
		return start(t, nil, args...)
	}
	return startProg(t, nil, nil, prefix[0], append(append(prefix[1:], dlockBin), args...)...)
}
