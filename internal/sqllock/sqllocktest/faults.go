package sqllocktest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sessiontest"
)

// WorkerEnv, when set (to the DSN), makes a test binary a worker process
// of [Processes]: its TestMain runs the tests without the leak check,
// and its TestChild runs [Worker].
const WorkerEnv = "DLOCK_SQL_TEST_WORKER"

// Worker environment: the goroutines and rounds of a worker, and whether
// its Backend is in session mode.
const (
	workEnv    = "DLOCK_SQL_TEST_WORK"
	sessionEnv = "DLOCK_SQL_TEST_SESSION"
)

// LeaseFaults runs the lease-mode fault scenarios (connections
// terminated, server restart) of package sessiontest.
func LeaseFaults(t *testing.T, tg Target) {
	sessiontest.RunLease(t, func(t *testing.T) sessiontest.LeaseEnv {
		srv := tg.Start(t, false)
		return sessiontest.LeaseEnv{
			Backend: func(t *testing.T) dlock.Backend {
				b, err := tg.Open(context.Background(), srv.DSN, Mode{})
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			TerminateAll: srv.TerminateAll,
			Server:       srv.Process,
		}
	})
}

// Processes: two OS processes (this test binary again, running its
// TestChild as a [Worker]) with many goroutines each increment a counter
// row under one lock by reading it and writing it back; the counter ends
// exact. In session mode the workers' Backends hold the lock with
// advisory locks on their own connections.
func Processes(t *testing.T, tg Target, session bool) {
	if os.Getenv(WorkerEnv) != "" {
		t.Skip("in a worker")
	}
	srv := tg.Start(t, false)
	db := tg.DB(t, srv.DSN)
	ctx := context.Background()
	for _, q := range []string{`CREATE TABLE counter (n BIGINT NOT NULL)`, `INSERT INTO counter VALUES (0)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const procs, goroutines, rounds = 2, 8, 25
	var wg sync.WaitGroup
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), WorkerEnv+"="+srv.DSN, fmt.Sprintf("%s=%d,%d", workEnv, goroutines, rounds))
		if session {
			cmd.Env = append(cmd.Env, sessionEnv+"=1")
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
	var n int
	if err := db.QueryRowContext(ctx, `SELECT n FROM counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := procs * goroutines * rounds; n != want {
		t.Errorf("counter = %d, want %d: increments were lost under the lock", n, want)
	}
}

// Worker is a worker process of [Processes]; it skips unless WorkerEnv
// is set.
func Worker(t *testing.T, tg Target) {
	dsn := os.Getenv(WorkerEnv)
	if dsn == "" {
		t.Skip("only as a worker of TestProcesses")
	}
	var goroutines, rounds int
	fmt.Sscanf(os.Getenv(workEnv), "%d,%d", &goroutines, &rounds)
	b, err := tg.Open(context.Background(), dsn, Mode{Session: os.Getenv(sessionEnv) != ""})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, b)
	defer c.Close()
	db := tg.DB(t, dsn)
	update := `UPDATE counter SET n = ?`
	if tg.Dialect == "postgres" {
		update = `UPDATE counter SET n = $1`
	}
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
				if _, err := db.ExecContext(l.Context(), update, n+1); err != nil {
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

// client returns a Client on b, failing the test if it cannot be made;
// the caller closes it.
func client(t testing.TB, b dlock.Backend) *dlock.Client {
	t.Helper()
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
