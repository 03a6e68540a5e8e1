//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

// secretParams are the parameters that carry a secret on some backend
// (postgres: password, sslpassword; redis+sentinel: sentinel_password,
// password), and a few that none takes: each backend either accepts or
// refuses them, and neither answer may show the value.
var secretParams = []string{"password", "sslpassword", "sentinel_password", "passwd", "auth", "auth_token"}

// TestOpenErrorsHideSecrets opens every scheme built in, against a closed
// port, with a secret in the user information and in each secret
// parameter: no error shows the secret. Before, a password given as a
// parameter was printed in clear (while one before the @ was masked).
func TestOpenErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	closed := opentest.ClosedPort(t)
	dir := t.TempDir()
	where := map[string]string{ // the part after scheme://[userinfo@]
		"redis": closed + "/0", "rediss": closed + "/0",
		"redis+sentinel": closed + "/mymaster", "rediss+sentinel": closed + "/mymaster",
		"redis+cluster": closed, "rediss+cluster": closed,
		"redlock":  closed + "," + opentest.ClosedPort(t) + "," + opentest.ClosedPort(t),
		"redlocks": closed + "," + opentest.ClosedPort(t) + "," + opentest.ClosedPort(t),
		"postgres": closed + "/db", "postgresql": closed + "/db", "mysql": closed + "/db",
		"etcd": closed + "/p", "zk": closed + "/p", "zookeeper": closed + "/p",
		"sqlite": filepath.ToSlash(filepath.Join(dir, "no", "such", "locks.db")), "mem": "x",
	}
	for _, scheme := range dlock.Schemes() {
		rest, ok := where[scheme]
		if !ok {
			t.Errorf("scheme %s is not covered by this test", scheme)
			continue
		}
		urls := []string{scheme + "://u:SECRET0@" + rest + "?connect_timeout=1s"}
		for i, p := range secretParams {
			urls = append(urls, fmt.Sprintf("%s://u@%s?%s=SECRET%d&connect_timeout=1s", scheme, rest, p, i+1))
		}
		for _, u := range urls {
			ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
			c, err := dlock.Open(ctx, u)
			cancel()
			if err == nil {
				c.Close() // sqlite, mem: nothing to reach
				continue
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("Open(%s): the error shows the secret: %v", u, err)
			}
		}
	}
}

// TestChildURLHasNoSecret: the command dlock run starts finds DLOCK_URL
// without the password, and dlock's own messages do not show it either.
// Before, DLOCK_URL carried the password to the command (and to every
// process it starts).
func TestChildURLHasNoSecret(t *testing.T) {
	t.Parallel()
	s := testserver.Redis(t)
	if _, err := s.Do(context.Background(), "CONFIG", "SET", "requirepass", "SECRET0"); err != nil {
		t.Fatal(err)
	}
	u := "redis://:SECRET0@" + s.Addr() + "/0"
	r := runDlock(t, nil, "run", "--url", u, "--name", "x", "--", "sh", "-c", `echo "$DLOCK_URL"`)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if got := strings.TrimSpace(r.stdout); strings.Contains(got, "SECRET0") || !strings.Contains(got, s.Addr()) {
		t.Errorf("the command's DLOCK_URL = %q, want the backend's address without the password", got)
	}
	// A wrong password: the error names the backend, not the password.
	r = runDlock(t, nil, "status", "--url", "redis://:SECRET1@"+s.Addr()+"/0")
	if r.code != exitBackend || strings.Contains(r.stderr, "SECRET1") || !strings.Contains(r.stderr, "authentication failed") {
		t.Errorf("status with a wrong password: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
