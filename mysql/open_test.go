package mysql_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// TestOpenErrors: unreachable server, failed login, missing database,
// malformed DSN and URL, a DSN without clientFoundRows: clear errors,
// nothing left open.
func TestOpenErrors(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()

	_, err := mysql.Open(context.Background(), "root@tcp(127.0.0.1:1)/test")
	t.Logf("unreachable: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1/test") {
		t.Errorf("Open of an unreachable server: %v; want ErrBackendUnavailable naming the server", err)
	}

	_, err = mysql.Open(context.Background(), srv.DSNFor("nosuchdb"))
	t.Logf("no database: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "nosuchdb") {
		t.Errorf("Open of a missing database: %v", err)
	}

	for _, q := range []string{`CREATE USER 'pwuser'@'%' IDENTIFIED BY 'right'`, `GRANT ALL ON test.* TO 'pwuser'@'%'`} {
		if _, err := srv.Query(ctx, "", q); err != nil {
			t.Fatal(err)
		}
	}
	_, err = mysql.Open(context.Background(), "pwuser:s3cret@tcp("+srv.Addr()+")/test")
	t.Logf("wrong password: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || strings.Contains(err.Error(), "s3cret") ||
		!strings.Contains(err.Error(), "Access denied") {
		t.Errorf("Open with a wrong password: %v; want ErrBackendUnavailable saying so, without the password", err)
	}
	b, err := mysql.Open(context.Background(), "pwuser:right@tcp("+srv.Addr()+")/test")
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	if s := b.String(); strings.Contains(s, "right") || s != "mysql "+srv.Addr()+"/test" {
		t.Errorf("String() = %q", s)
	}
	b.Close()

	_, err = mysql.Open(context.Background(), "root@tcp(127.0.0.1:1/test")
	t.Logf("malformed: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("malformed DSN: %v; want ErrInvalidOption", err)
	}
	_, err = mysql.Open(context.Background(), "root@tcp("+srv.Addr()+")/")
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("DSN without a database: %v; want ErrInvalidOption", err)
	}

	for _, raw := range []string{
		"mysql://root@" + srv.Addr() + "/test?table=1bad",
		"mysql://root@" + srv.Addr() + "/",
		"mysql://root@" + srv.Addr() + "/test?waiter_timeout=soon",
		"mysql:opaque",
	} {
		_, err = dlock.Open(ctx, raw)
		t.Logf("%s: %v", raw, err)
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("dlock.Open(%q): %v; want ErrInvalidOption", raw, err)
		}
	}
	_, err = dlock.Open(ctx, "mysql://u:pw@127.0.0.1:1/test")
	t.Logf("dlock.Open unreachable: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || strings.Contains(err.Error(), ":pw@") {
		t.Errorf("dlock.Open unreachable: %v", err)
	}

	// New refuses a DSN without clientFoundRows.
	db := openDB(t, srv.DSN())
	_, err = mysql.New(db)
	t.Logf("without clientFoundRows: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "clientFoundRows") {
		t.Errorf("New without clientFoundRows: %v", err)
	}
	db.Close()

	// No connection left behind by the failures.
	// The server may still be tearing down a connection the client closed.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ids := clientConns(t, srv)
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d connections left open: %v", len(ids), ids)
			break
		}
	}
}

// TestURL opens through dlock.Open, with a password that needs escaping
// and a table option.
func TestURL(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	for _, q := range []string{`CREATE USER 'app'@'%' IDENTIFIED BY 'p@ss/w:rd'`, `GRANT ALL ON test.* TO 'app'@'%'`} {
		if _, err := srv.Query(ctx, "", q); err != nil {
			t.Fatal(err)
		}
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword("app", "p@ss/w:rd"), Host: srv.Addr(), Path: "/test",
		RawQuery: "table=url_locks&waiter_timeout=2s&innodb_lock_wait_timeout=5"}
	c, err := dlock.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "")
	if err != nil || len(info) != 1 || info[0].Token != l.Token() {
		t.Errorf("Inspect: %+v, %v", info, err)
	}
	// The held lock's row is in the table the URL named.
	rows, err := srv.Query(ctx, "test", `SELECT COUNT(*) FROM url_locks WHERE owner <> ''`)
	if err != nil || rows[0][0] != "1" {
		t.Fatalf("url_locks while held: %v %v", rows, err)
	}
	l.Unlock(ctx)
	// Released, the name keeps no row.
	rows, err = srv.Query(ctx, "test", `SELECT COUNT(*) FROM url_locks`)
	if err != nil || rows[0][0] != "0" {
		t.Fatalf("url_locks after release: %v %v", rows, err)
	}
}

// TestMigrateConcurrent creates the tables from many connections at once.
func TestMigrateConcurrent(t *testing.T) {
	srv := testserver.MariaDB(t)
	db := openDB(t, srv.DSN())
	defer db.Close()
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- mysql.Migrate(context.Background(), db, mysql.Table("mig_locks")) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'test' AND TABLE_NAME LIKE 'mig_locks%'`).Scan(&n); err != nil || n != 4 {
		t.Errorf("tables: %d, %v", n, err)
	}
}

// TestNoMigrate: with NoMigrate (?migrate=false) Open checks the tables
// instead of creating them; missing, they are an error of Open that names
// them and says how to create them, and nothing is created.
func TestNoMigrate(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	url := "mysql://root@" + srv.Addr() + "/test?table=nm_locks"
	for _, open := range []func() (dlock.Backend, error){
		func() (dlock.Backend, error) {
			return mysql.Open(context.Background(), srv.DSN(), mysql.Table("nm_locks"), mysql.NoMigrate())
		},
		func() (dlock.Backend, error) {
			c, err := dlock.Open(ctx, url+"&migrate=false")
			if err != nil {
				return nil, err
			}
			return c.Backend(), c.Close()
		},
	} {
		b, err := open()
		if err == nil {
			b.Close()
			t.Fatal("opened without the tables")
		}
		if msg := err.Error(); !strings.Contains(msg, "nm_locks") || !strings.Contains(msg, "dlock migrate") {
			t.Errorf("error %q does not name the table and dlock migrate", msg)
		}
	}
	rows, err := srv.Query(ctx, "", `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'test' AND table_name LIKE 'nm\_locks%'`)
	if err != nil || rows[0][0] != "0" {
		t.Fatalf("tables made under NoMigrate: %v, %v", rows, err)
	}
	if _, err := dlock.Open(ctx, url+"&migrate=maybe"); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "maybe") {
		t.Errorf("migrate=maybe: %v", err)
	}

	db := openDB(t, srv.DSN())
	if err := mysql.Migrate(ctx, db, mysql.Table("nm_locks")); err != nil {
		t.Fatal(err)
	}
	b, err := mysql.Open(context.Background(), srv.DSN(), mysql.Table("nm_locks"), mysql.NoMigrate())
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer b.Close()
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "nm", Owner: "o", TTL: time.Second})
	if err != nil || g.Token == 0 {
		t.Fatalf("Acquire: %v, %+v", err, g)
	}
}

func TestNewRefusesNilClient(t *testing.T) {
	_, err := mysql.New(nil)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql: nil *sql.DB") {
		t.Errorf("New(nil): %v, want an error matching ErrInvalidOption that says \"mysql: nil *sql.DB\"", err)
	}
	err = mysql.Migrate(context.Background(), nil, mysql.Table("a-b"))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql: nil *sql.DB") || !strings.Contains(err.Error(), `"a-b"`) {
		t.Errorf("Migrate(ctx, nil, Table(\"a-b\")): %v, want an error matching ErrInvalidOption that names both", err)
	}
}
