package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sessiontest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionNames is how many locks the many-names item holds at once in
// session mode: each costs a connection.
const sessionNames = 50

func TestSessionConformance(t *testing.T) {
	srv := testserver.Postgres(t, testserver.WithArgs("-c", "max_connections=300"))
	dlocktest.Run(t, sessionFactory(srv.TestDSN(), postgres.Table("sess_locks")), dlocktest.Names(sessionNames),
		foreign(t, srv.TestDSN(), "sess_locks"),
		reclaim(t, srv.TestDSN(), "sess_locks"))
}

func sessionFactory(dsn string, opts ...postgres.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := postgres.Open(context.Background(), dsn, append(opts, postgres.Session())...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !b.Session() {
			t.Fatal("Open with Session() gave a lease-mode Backend")
		}
		return b
	}
}

func sessionClient(t *testing.T, dsn string) *dlock.Client {
	return openClient(t, dsn, postgres.Session())
}

// openClient opens a Backend at dsn with opts and a Client on it, closed
// when the test ends.
func openClient(t *testing.T, dsn string, opts ...postgres.Option) *dlock.Client {
	t.Helper()
	b, err := postgres.Open(context.Background(), dsn, opts...)
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
	srv := testserver.Postgres(t)
	query := func(t *testing.T, q string) string {
		t.Helper()
		rows, err := srv.Query(context.Background(), "test", q)
		if err != nil {
			t.Fatal(err)
		}
		return rows[0][0]
	}
	// The advisory lock of name, as pg_locks shows it.
	lockOf := func(name string) string {
		k := uint64(postgres.SessionKey(postgres.DefaultTable, name))
		return fmt.Sprintf("locktype = 'advisory' AND classid = %d AND objid = %d AND objsubid = 1", k>>32, k&0xffffffff)
	}
	return sessiontest.Env{
		Client: func(t *testing.T) *dlock.Client { return sessionClient(t, srv.TestDSN()) },
		Cut: func(t *testing.T, name string) {
			if n := query(t, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE granted AND `+lockOf(name)); n != "1" {
				t.Fatalf("%s connections terminated, want 1", n)
			}
		},
		Holder: func(t *testing.T, name string) string {
			return query(t, `SELECT COALESCE(max(pid)::text, '') FROM pg_locks WHERE granted AND `+lockOf(name))
		},
		Query:  query,
		Server: srv,
	}
}

// TestSessionFaults runs the session fault scenarios of package
// sessiontest, each on a server of its own. Cut is pg_terminate_backend of the holding connection: the watcher reports the loss within about 100 ms.
func TestSessionFaults(t *testing.T) { sessiontest.Run(t, sessionEnv) }

// TestSessionURL: ?mode=session selects session mode; a bad mode is an
// error naming the backend.
func TestSessionURL(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	c, err := dlock.Open(ctx, srv.TestDSN()+"&mode=session&table=url_sess")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, ok := c.Backend().(*postgres.Backend); !ok || !b.Session() || b.Table() != "url_sess" {
		t.Fatalf("Backend %T (%v) is not in session mode on url_sess", c.Backend(), c.Backend())
	}
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	u, _ := url.Parse(srv.TestDSN() + "&mode=lease")
	_, opts, err := postgres.ParseURL(u)
	if err != nil || len(opts) != 1 {
		t.Errorf("ParseURL(mode=lease): %v, %v", opts, err)
	}
	_, err = dlock.Open(ctx, srv.TestDSN()+"&mode=sessions")
	t.Logf("bad mode: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "postgres") || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("bad mode: %v; want ErrInvalidOption naming postgres and the value", err)
	}
}

// TestSessionStatements counts the statements of session mode at the
// driver.
func TestSessionStatements(t *testing.T) {
	srv := testserver.Postgres(t)
	cfg, err := pgxpool.ParseConfig(srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	cnt := new(counter)
	cfg.ConnConfig.Tracer = cnt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.NewPool(pool, postgres.Session())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	req := dlock.Request{Name: "stmts", Owner: "o", TTL: 10 * time.Second}
	measure := func(what string, want int64, fn func()) {
		before := cnt.n.Load()
		fn()
		n := cnt.n.Load() - before
		t.Logf("%s: %d statement(s)", what, n)
		if n != want {
			t.Errorf("%s took %d statements, want %d", what, n, want)
		}
	}
	for range 2 { // warm up
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
	}
	var g dlock.Grant
	measure("acquire", 1, func() {
		if g, _, err = b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
	var g2 dlock.Grant
	measure("re-entry", 1, func() {
		if g2, _, err = b.Acquire(ctx, req); err != nil || g2.Token != g.Token || g2.Count != 2 {
			t.Fatalf("re-entry: %+v, %v", g2, err)
		}
	})
	measure("inner release", 1, func() {
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g2.Token, Handle: g2.Handle}); err != nil {
			t.Fatal(err)
		}
	})
	measure("renew", 1, func() {
		if err := b.Renew(ctx, h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	measure("try while held (refused, with the holder)", 2, func() {
		_, _, err := b.Acquire(ctx, dlock.Request{Name: req.Name, Owner: "other", TTL: time.Second})
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	})
	measure("release", 1, func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSessionConformancePool runs the suite in session mode on Backends
// over a pgxpool.Pool and over a *sql.DB of the caller's: the connection
// that carries a lock is taken out of the caller's pool and never goes back
// to it holding an advisory lock.
func TestSessionConformancePool(t *testing.T) {
	srv := testserver.Postgres(t, testserver.WithArgs("-c", "max_connections=300"))
	pool, db := callerPools(t, srv.TestDSN(), 120) // a connection per held lock and per waiter
	t.Run("pgxpool", func(t *testing.T) {
		dlocktest.Run(t, func(t testing.TB) dlock.Backend {
			b, err := postgres.NewPool(pool, postgres.Table("spool_locks"), postgres.Session())
			if err != nil || !b.Session() {
				t.Fatalf("NewPool: %v (session %v)", err, err == nil && b.Session())
			}
			return b
		}, dlocktest.Names(sessionNames), callerPoolLeaks, dlocktest.Grants(variantGrants))
	})
	t.Run("sql.DB", func(t *testing.T) {
		dlocktest.Run(t, func(t testing.TB) dlock.Backend {
			b, err := postgres.New(db, postgres.Table("sdb_locks"), postgres.Session())
			if err != nil || !b.Session() {
				t.Fatalf("New: %v (session %v)", err, err == nil && b.Session())
			}
			return b
		}, dlocktest.Names(sessionNames), callerPoolLeaks, dlocktest.Grants(variantGrants))
	})
	// Every advisory lock went with its hold: none is left on a connection
	// of the caller's pools.
	rows, err := srv.Query(context.Background(), "test", `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "0" {
		t.Errorf("%s advisory locks left after the suite", rows[0][0])
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's DB after the Backends closed: %v", err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("the caller's pool after the Backends closed: %v", err)
	}
}
