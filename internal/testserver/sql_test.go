package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func pgq(t *testing.T, s *PostgresServer, db, sql string) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.Query(ctx, db, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return rows
}

func TestPostgresKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Postgres(t)
	t.Logf("postgres ready in %v at %s", time.Since(start), s.DSN())
	want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port())
	if s.DSN() != want || s.TestDSN() != strings.Replace(want, "/postgres?", "/test?", 1) {
		t.Fatalf("DSN %s / %s", s.DSN(), s.TestDSN())
	}
	if os.Geteuid() == 0 {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID()))
		if !strings.Contains(string(st), "\nUid:\t101\t") && strings.Contains(string(st), "\nUid:\t0\t") {
			t.Errorf("postgres runs as root:\n%s", st)
		}
	}
	pgq(t, s, "test", "CREATE TABLE t (v text)")
	pgq(t, s, "test", "INSERT INTO t VALUES ('kept')")
	_, err := s.Query(context.Background(), "test", "SELECT nope")
	var pe *PGError
	if !errors.As(err, &pe) || pe.Code != "42703" {
		t.Fatalf("bad query: %v, want SQLSTATE 42703", err)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres restarted after SIGKILL in %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	if rows := pgq(t, s, "test", "SELECT v FROM t"); len(rows) != 1 || rows[0][0] != "kept" {
		t.Fatalf("rows after restart: %v", rows)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = s.Query(ctx, "test", "SELECT 1")
	cancel()
	if err == nil {
		t.Fatal("query succeeded while paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	pgq(t, s, "test", "SELECT 1")
	start = time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres stopped (SIGINT) in %v", time.Since(start))
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	pgq(t, s, "test", "SELECT 1")
}

func myq(t *testing.T, s *MariaDBServer, db, sql string) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.Query(ctx, db, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return rows
}

func TestMariaDBKillRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := MariaDB(t)
	t.Logf("mariadb ready in %v at %s", time.Since(start), s.DSN())
	if want := fmt.Sprintf("root@tcp(127.0.0.1:%d)/test", s.Port()); s.DSN() != want {
		t.Fatalf("DSN %s, want %s", s.DSN(), want)
	}
	if rows := myq(t, s, "test", "SELECT CURRENT_USER(), DATABASE(), NULL"); len(rows) != 1 ||
		!strings.HasPrefix(rows[0][0], "root@") || rows[0][1] != "test" {
		t.Fatalf("rows %v", rows)
	}
	myq(t, s, "test", "CREATE TABLE t (v varchar(10)) ENGINE=InnoDB")
	myq(t, s, "test", "INSERT INTO t VALUES ('kept')")
	_, err := s.Query(context.Background(), "nodb", "SELECT 1")
	var me *MySQLError
	if !errors.As(err, &me) || me.Code != 1049 {
		t.Fatalf("unknown database: %v, want Error 1049", err)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("mariadb restarted after SIGKILL in %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	if rows := myq(t, s, "test", "SELECT v FROM t"); len(rows) != 1 || rows[0][0] != "kept" {
		t.Fatalf("rows after restart: %v", rows)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
