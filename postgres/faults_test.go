package postgres_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
)

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
