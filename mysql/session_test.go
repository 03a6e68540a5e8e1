package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sessiontest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func sessionFactory(dsn string, opts ...mysql.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := mysql.Open(context.Background(), dsn, append(opts, mysql.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}

func TestSessionConformance(t *testing.T) {
	srv := testserver.MariaDB(t, testserver.WithArgs("--max-connections=300"))
	dlocktest.Run(t, sessionFactory(srv.DSN(), mysql.Table("sess_locks")), dlocktest.Names(sessionNames),
		foreign(t, srv.DSN(), "sess_locks"),
		reclaim(t, srv.DSN(), "sess_locks"), dlocktest.Parallel(1)) // one at a time: see TestConformance
}

func sessionClient(t *testing.T, dsn string) *dlock.Client {
	t.Helper()
	b, err := mysql.Open(context.Background(), dsn, mysql.Session())
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

// sessionEnv is a server of its own for a session fault test.
func sessionEnv(t *testing.T) sessiontest.Env {
	srv := testserver.MariaDB(t)
	query := func(t *testing.T, q string) string {
		t.Helper()
		rows, err := srv.Query(context.Background(), "test", q)
		if err != nil {
			t.Fatal(err)
		}
		return rows[0][0]
	}
	holder := func(t *testing.T, name string) string {
		return query(t, `SELECT COALESCE(IS_USED_LOCK('`+mysql.SessionLockName(mysql.DefaultTable, name)+`'), '')`)
	}
	return sessiontest.Env{
		Client: func(t *testing.T) *dlock.Client { return sessionClient(t, srv.DSN()) },
		Cut: func(t *testing.T, name string) {
			id := holder(t, name)
			if id == "" {
				t.Fatalf("no connection holds the user lock of %q", name)
			}
			if _, err := srv.Query(context.Background(), "", "KILL "+id); err != nil {
				t.Fatal(err)
			}
		},
		Holder: holder,
		Query:  query,
		Server: srv,
	}
}

// TestSessionFaults runs the session fault scenarios of package
// sessiontest, each on a server of its own. Cut is KILL of the holding connection: the loss is reported by the next renewal (TTL/3).
func TestSessionFaults(t *testing.T) { sessiontest.Run(t, sessionEnv) }

// TestSessionURL: ?mode=session selects session mode; a bad mode is an
// error naming the backend.
func TestSessionURL(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	u := "mysql://root@" + srv.Addr() + "/test"
	c, err := dlock.Open(ctx, u+"?mode=session&table=url_sess")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, ok := c.Backend().(*mysql.Backend); !ok || !b.Session() || b.Table() != "url_sess" {
		t.Fatalf("Backend %T (%v) is not in session mode on url_sess", c.Backend(), c.Backend())
	}
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	_, err = dlock.Open(ctx, u+"?mode=sessions")
	t.Logf("bad mode: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql") || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("bad mode: %v; want ErrInvalidOption naming mysql and the value", err)
	}
	_, err = c.Mutex("long", dlock.TTL(time.Hour)).TryLock(ctx)
	t.Logf("TTL above 2 × wait_timeout: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("TTL of an hour with wait_timeout 60s: %v, want ErrInvalidOption", err)
	}
}

// TestSessionConformanceDB runs the suite in session mode on Backends over
// a *sql.DB of the caller's: the connection that carries a lock is taken
// out of the caller's pool and never goes back to it holding a user lock.
func TestSessionConformanceDB(t *testing.T) {
	srv := testserver.MariaDB(t, testserver.WithArgs("--max-connections=300"))
	db := callerDB(t, srv.DSN())
	dlocktest.Run(t, func(t testing.TB) dlock.Backend {
		b, err := mysql.New(db, mysql.Table("sdb_locks"), mysql.Session())
		if err != nil || !b.Session() {
			t.Fatalf("New: %v (session %v)", err, err == nil && b.Session())
		}
		return b
		// The per-item leak check would count the watcher goroutine of
		// each of the caller's pooled connections; TestMain checks for
		// leaks once db is closed.
	}, dlocktest.Names(sessionNames), dlocktest.NoLeakCheck(), dlocktest.Grants(variantGrants), dlocktest.Parallel(1))
	// Every user lock went with its hold (the metadata_lock_info plugin,
	// shipped with MariaDB, lists the user locks of all connections).
	ctx := context.Background()
	if _, err := srv.Query(ctx, "", `INSTALL SONAME 'metadata_lock_info'`); err != nil {
		t.Fatal(err)
	}
	rows, err := srv.Query(ctx, "", `SELECT count(*) FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'`)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "0" {
		t.Errorf("%s user locks left after the suite", rows[0][0])
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's DB after the Backends closed: %v", err)
	}
}
