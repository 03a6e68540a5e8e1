package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sessiontest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

func client(t *testing.T, dsn string) *dlock.Client {
	t.Helper()
	b, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// terminateAll ends every client connection but the caller's.
func terminateAll(t *testing.T, srv *testserver.PostgresServer) int {
	t.Helper()
	rows, err := srv.Query(context.Background(), "test", `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(rows[0][0])
	return n
}

// TestLeaseFaults runs the lease-mode fault scenarios (connections
// terminated, server restart) of package sessiontest.
func TestLeaseFaults(t *testing.T) {
	sessiontest.RunLease(t, func(t *testing.T) sessiontest.LeaseEnv {
		srv := testserver.Postgres(t)
		return sessiontest.LeaseEnv{
			Backend: func(t *testing.T) dlock.Backend {
				b, err := postgres.Open(context.Background(), srv.TestDSN())
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			TerminateAll: func(t *testing.T) int { return terminateAll(t, srv) },
			Server:       srv,
		}
	})
}

// TestProcesses: two OS processes with many goroutines each increment a
// counter row under one lock by reading it and writing it back; the
// counter ends exact.
func TestProcesses(t *testing.T) { processes(t, false) }

// TestProcessesSession is TestProcesses in session mode: the workers'
// Backends hold the lock with advisory locks on their own connections.
func TestProcessesSession(t *testing.T) { processes(t, true) }

func processes(t *testing.T, session bool) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in a worker")
	}
	srv := testserver.Postgres(t)
	if _, err := srv.Query(context.Background(), "test", `CREATE TABLE counter (n BIGINT NOT NULL); INSERT INTO counter VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	const procs, goroutines, rounds = 2, 8, 25
	var wg sync.WaitGroup
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+srv.TestDSN(), fmt.Sprintf("DLOCK_CHILD_WORK=%d,%d", goroutines, rounds))
		if session {
			cmd.Env = append(cmd.Env, childSessionEnv+"=1")
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if line := sc.Text(); strings.Contains(line, "FAIL") || strings.Contains(line, "child:") {
					t.Logf("worker %d: %s", p, line)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker %d: %v", p, err)
			}
		})
	}
	wg.Wait()
	rows, err := srv.Query(context.Background(), "test", `SELECT n FROM counter`)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(procs * goroutines * rounds); rows[0][0] != want {
		t.Errorf("counter = %s, want %s: increments were lost under the lock", rows[0][0], want)
	}
}

// childSessionEnv, when set in a worker, makes its Backend use session
// mode.
const childSessionEnv = "DLOCK_CHILD_SESSION"

// TestChild is a worker process of TestProcesses and
// TestProcessesSession.
func TestChild(t *testing.T) {
	dsn := os.Getenv(childEnv)
	if dsn == "" {
		t.Skip("only as a worker of TestProcesses")
	}
	var goroutines, rounds int
	fmt.Sscanf(os.Getenv("DLOCK_CHILD_WORK"), "%d,%d", &goroutines, &rounds)
	var c *dlock.Client
	if os.Getenv(childSessionEnv) != "" {
		c = sessionClient(t, dsn)
	} else {
		c = client(t, dsn)
	}
	db := openDB(t, dsn)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			m := c.Mutex("counter", dlock.TTL(5*time.Second))
			for range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				var n int64
				if err := db.QueryRowContext(l.Context(), `SELECT n FROM counter`).Scan(&n); err != nil {
					t.Error(err)
				}
				if _, err := db.ExecContext(l.Context(), `UPDATE counter SET n = $1`, n+1); err != nil {
					t.Error(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println("child: done")
}
