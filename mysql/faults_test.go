package mysql_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

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
func TestLeaseFaults(t *testing.T) { sqllocktest.LeaseFaults(t, target) }

// TestProcesses: two OS processes with many goroutines each increment a
// counter row under one lock by reading it and writing it back; the
// counter ends exact.
func TestProcesses(t *testing.T) { sqllocktest.Processes(t, target, false) }

// TestProcessesSession is TestProcesses in session mode: the workers'
// Backends hold the lock with advisory locks on their own connections.
func TestProcessesSession(t *testing.T) { sqllocktest.Processes(t, target, true) }

// TestChild is a worker process of TestProcesses and
// TestProcessesSession.
func TestChild(t *testing.T) { sqllocktest.Worker(t, target) }
