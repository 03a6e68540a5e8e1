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

// TestConnectionsTerminated: the server ends the connections of a live
// holder (KILL) again and again: in lease mode that loses
// nothing — renewals and the release go through new connections — and a
// waiter gets the lock only after the release, with a higher token. A
// holder that stops renewing (a crashed process) loses the lock at the
// end of its TTL, by the database's clock, to a waiter with a higher
// token.
func TestConnectionsTerminated(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	holder, waiter := client(t, srv.DSN()), client(t, srv.DSN())
	l, err := holder.Mutex("term", dlock.TTL(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex("term", dlock.TTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for range 6 {
		time.Sleep(400 * time.Millisecond)
		t.Logf("terminated %d connections", terminateAll(t, srv))
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the live holder lost its lease to terminated connections: %v", err)
	}
	select {
	case <-got:
		t.Fatal("the waiter got the lock while the holder held it")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after terminated connections: %v", err)
	}
	var l2 *dlock.Lease
	select {
	case l2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}

	// A holder that dies with its connections: the lock expires.
	b, err := mysql.Open(context.Background(), srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "term2", Owner: "dead", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Close() // never renewed, never released
	go func() {
		l, err := waiter.Mutex("term2", dlock.TTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	start := time.Now()
	time.Sleep(200 * time.Millisecond) // the waiter's first attempt (which would report an outage at once) is over
	terminateAll(t, srv)
	l3 := <-got
	if l3 == nil {
		t.FailNow()
	}
	t.Logf("the dead holder's lock (token %d) went to the waiter (token %d) after %v", g.Token, l3.Token(), time.Since(start))
	if l3.Token() <= g.Token {
		t.Errorf("token %d after %d", l3.Token(), g.Token)
	}
	l2.Unlock(ctx)
	l3.Unlock(ctx)
}

// TestServerRestart: the server is killed and restarted while locks are
// held. Afterwards every lock is either still held by its live holder or
// free (no stuck locks), and new grants have higher tokens than before.
func TestServerRestart(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	a, b := client(t, srv.DSN()), client(t, srv.DSN())
	var leases []*dlock.Lease
	for i := range 5 {
		l, err := a.Mutex(fmt.Sprint("restart", i), dlock.TTL(2*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The holder may or may not have kept its leases through the outage
	// (2s TTL); either way it releases what it holds, and each lock is
	// then free for b, with a higher token.
	for i, l := range leases {
		held := l.Err() == nil
		err := l.Unlock(ctx)
		t.Logf("lock %d: held through the restart: %v; unlock: %v", i, held, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l2, err := b.Mutex(fmt.Sprint("restart", i), dlock.TTL(2*time.Second)).Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("lock %d after the restart: %v", i, err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("lock %d: token %d after %d", i, l2.Token(), l.Token())
		}
		l2.Unlock(ctx)
	}
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
