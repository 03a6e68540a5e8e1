//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
)

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	path := strings.TrimPrefix(url, "sqlite://")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Someone else's table of the name asked for is reported, not used.
	if _, err := db.Exec(`CREATE TABLE theirs (id INTEGER PRIMARY KEY, note TEXT)`); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // a second run finds the tables and checks them
		r := runDlock(t, nil, "migrate", "--url", url+"?table=jobs")
		if r.code != 0 || !strings.Contains(r.stdout, "the lock table jobs on sqlite") || !strings.Contains(r.stdout, "is ready") {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i+1, r.code, r.stdout, r.stderr)
		}
	}
	for _, table := range []string{"jobs", "jobs_waiters", "jobs_fence"} {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s: %d found, err %v", table, n, err)
		}
	}

	r := runDlock(t, nil, "migrate", "--url", url+"?table=theirs")
	if r.code != exitForeign || !strings.Contains(r.stderr, "theirs") || !strings.Contains(r.stderr, "not a dlock table") {
		t.Errorf("someone else's table: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runDlock(t, nil, "migrate", "--url", url+"?table=no-dashes")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no-dashes") {
		t.Errorf("bad table name: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runDlock(t, nil, "migrate", "--url", url, "extra")
	if r.code != exitUsage {
		t.Errorf("extra argument: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestMigrateNoSchema(t *testing.T) {
	t.Parallel()
	r := runDlock(t, nil, "migrate", "--url", "mem://")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "keeps no tables") {
		t.Errorf("mem: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestMigratePostgres creates the tables in a fresh PostgreSQL database
// with dlock migrate, then checks them there.
func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	srv := testserver.Postgres(t)
	// The URL of an application that only checks the tables is fine here.
	r := runDlock(t, nil, "migrate", "--url", srv.TestDSN()+"&table=pg_jobs&migrate=false")
	if r.code != 0 || !strings.Contains(r.stdout, "the lock table pg_jobs on postgres") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := srv.Query(ctx, "test", `SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'pg\_jobs%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[[pg_jobs] [pg_jobs_fence] [pg_jobs_holders] [pg_jobs_listeners] [pg_jobs_waiters] [pg_jobs_watchers]]" {
		t.Errorf("tables after migrate: %v", rows)
	}
}

// TestMigrateMariaDB does the same on MariaDB.
func TestMigrateMariaDB(t *testing.T) {
	t.Parallel()
	srv := testserver.MariaDB(t)
	r := runDlock(t, nil, "migrate", "--url", "mysql://root@"+srv.Addr()+"/test?table=my_jobs")
	if r.code != 0 || !strings.Contains(r.stdout, "the lock table my_jobs on mysql") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := srv.Query(ctx, "test", `SELECT table_name FROM information_schema.tables WHERE table_schema = 'test' AND table_name LIKE 'my\_jobs%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "[[my_jobs] [my_jobs_fence] [my_jobs_holders] [my_jobs_waiters]]" {
		t.Errorf("tables after migrate: %v", rows)
	}
}
