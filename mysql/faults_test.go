package mysql_test

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
	"github.com/dlock-dev/dlock/mysql"
)

func client(t *testing.T, dsn string) *dlock.Client {
	t.Helper()
	b, err := mysql.Open(context.Background(), dsn)
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

// terminateAll KILLs every client connection but the caller's.
func terminateAll(t *testing.T, srv *testserver.MariaDBServer) int {
	t.Helper()
	ids := clientConns(t, srv)
	for _, id := range ids {
		if _, err := srv.Query(context.Background(), "", "KILL "+id); err != nil {
			t.Logf("KILL %s: %v", id, err)
		}
	}
	return len(ids)
}

// clientConns lists the ids of the server's client connections but the
// caller's. It reads SHOW PROCESSLIST, not information_schema.PROCESSLIST,
// whose query crashed MariaDB 10.11.19 under concurrent load (signal 11
// in ha_maria::drop_table).
func clientConns(t *testing.T, srv *testserver.MariaDBServer) []string {
	t.Helper()
	rows, err := srv.Query(context.Background(), "", "SHOW PROCESSLIST")
	if err != nil {
		t.Fatal(err)
	}
	// Id, User, Host, db, Command, Time, State, Info, …
	var ids []string
	for _, r := range rows {
		if len(r) < 8 {
			t.Fatalf("SHOW PROCESSLIST row %q: want at least 8 columns", r)
		}
		if r[1] == "system user" || r[1] == "event_scheduler" || r[4] == "Daemon" || r[7] == "SHOW PROCESSLIST" {
			continue
		}
		ids = append(ids, r[0])
	}
	return ids
}

// TestLeaseFaults runs the lease-mode fault scenarios (connections
// terminated, server restart) of package sessiontest.
func TestLeaseFaults(t *testing.T) {
	sessiontest.RunLease(t, func(t *testing.T) sessiontest.LeaseEnv {
		srv := testserver.MariaDB(t)
		return sessiontest.LeaseEnv{
			Backend: func(t *testing.T) dlock.Backend {
				b, err := mysql.Open(context.Background(), srv.DSN())
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
	srv := testserver.MariaDB(t)
	if _, err := srv.Query(context.Background(), "test", `CREATE TABLE counter (n BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Query(context.Background(), "test", `INSERT INTO counter VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	const procs, goroutines, rounds = 2, 8, 25
	var wg sync.WaitGroup
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+srv.DSN(), fmt.Sprintf("DLOCK_CHILD_WORK=%d,%d", goroutines, rounds))
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
				if _, err := db.ExecContext(l.Context(), `UPDATE counter SET n = ?`, n+1); err != nil {
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
