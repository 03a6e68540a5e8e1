package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(sqllocktest.WorkerEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

func openFactory(dsn string, opts ...postgres.Option) dlocktest.Factory {
	return func(t testing.TB) dlock.Backend {
		t.Helper()
		b, err := postgres.Open(context.Background(), dsn, opts...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return b
	}
}

// variantGrants is the exclusion item's grants per goroutine in the
// suite's runs over other ways to open the Backend: those runs are about
// the wiring, and TestConformance makes the suite's full 200.
const variantGrants = 50

func TestConformance(t *testing.T) {
	srv := testserver.Postgres(t)
	dlocktest.Run(t, openFactory(srv.TestDSN()), foreign(t, srv.TestDSN(), "dlock_locks"),
		reclaim(t, srv.TestDSN(), "dlock_locks"))
}

// reclaim is the suite's hook to force a sweep of the lease table table
// (through a Backend of its own) and count its rows.
func reclaim(t *testing.T, dsn, table string) dlocktest.Option {
	b, err := postgres.Open(context.Background(), dsn, postgres.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Reclaim(db, table, b.Reclaim)
}

// foreign is the suite's hook to plant foreign data in the lease table
// table, through a *sql.DB of its own.
func foreign(t *testing.T, dsn, table string) dlocktest.Option {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqllocktest.Foreign(db, "postgres", table)
}

// TestConformancePool runs the suite on Backends over one pgxpool.Pool
// and, with another table, over one *sql.DB; both stay open after.
func TestConformancePool(t *testing.T) {
	srv := testserver.Postgres(t)
	pool, db := callerPools(t, srv.TestDSN(), 24)
	t.Run("pgxpool", func(t *testing.T) {
		dlocktest.Run(t, func(t testing.TB) dlock.Backend {
			b, err := postgres.NewPool(pool, postgres.Table("pool_locks"))
			if err != nil {
				t.Fatalf("NewPool: %v", err)
			}
			return b
		}, callerPoolLeaks, dlocktest.Grants(variantGrants))
	})
	t.Run("sql.DB", func(t *testing.T) {
		dlocktest.Run(t, func(t testing.TB) dlock.Backend {
			b, err := postgres.New(db, postgres.Table("db_locks"))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if want := "postgres 127.0.0.1:"; !strings.HasPrefix(b.String(), want) || !strings.HasSuffix(b.String(), "/test") {
				t.Errorf("String() = %q", b.String())
			}
			return b
		}, callerPoolLeaks, dlocktest.Grants(variantGrants))
	})
	if err := db.Ping(); err != nil {
		t.Fatalf("the caller's DB after the Backends closed: %v", err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("the caller's pool after the Backends closed: %v", err)
	}
}

// callerPoolLeaks leaves out the suite's per-item goroutine leak check
// on the caller's pools: their idle connections stay open after the
// Backend closes, and pgx leaves a background reader blocked on such a
// connection after a write that took more than 15 ms (a loaded machine)
// until it reads again or closes (pgconn's slowWriteTimer). TestMain checks for leaks once the pools
// are closed.
var callerPoolLeaks = dlocktest.NoLeakCheck()

// callerPools opens a pgxpool.Pool of up to maxConns connections and a
// *sql.DB that keeps 24 idle, both closed when t ends: the caller's pools
// that NewPool and New are given. They must be big enough for the suite's
// 16 goroutines: a small pool (pgxpool's default is 4 connections on 2
// cores; database/sql keeps 2 idle) makes them queue or reconnect all the
// time.
func callerPools(t *testing.T, dsn string, maxConns int32) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(24)
	t.Cleanup(func() { db.Close() })
	return pool, db
}

// counter counts the statements pgx sends.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestStatements counts the statements of an acquisition, a renewal and
// a release at the driver: one each.
func TestStatements(t *testing.T) {
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
	b, err := postgres.NewPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := dlock.Request{Name: "stmts", Owner: "o", TTL: 10 * time.Second}
	// Warm up (prepare) first.
	for range 2 {
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	measure := func(what string, fn func()) {
		before := cnt.n.Load()
		fn()
		n := cnt.n.Load() - before
		t.Logf("%s: %d statement(s)", what, n)
		if n != 1 {
			t.Errorf("%s took %d statements, want 1", what, n)
		}
	}
	var g dlock.Grant
	measure("acquire", func() {
		g, _, err = b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
	})
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}
	measure("renew", func() {
		if err := b.Renew(ctx, h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	measure("release", func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenErrors: unreachable server, failed login, malformed DSN and URL,
// bad options: clear errors, nothing left open.
func TestOpenErrors(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()

	_, err := postgres.Open(context.Background(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable")
	t.Logf("unreachable: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1/test") {
		t.Errorf("Open of an unreachable server: %v; want ErrBackendUnavailable naming the server", err)
	}

	_, err = postgres.Open(context.Background(), strings.Replace(srv.TestDSN(), "/test?", "/nosuchdb?", 1))
	t.Logf("no database: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "nosuchdb") {
		t.Errorf("Open of a missing database: %v", err)
	}

	if _, err := srv.Query(ctx, "test", `CREATE ROLE pwuser LOGIN PASSWORD 'right'`); err != nil {
		t.Fatal(err)
	}
	// The server trusts everybody; make it ask pwuser for a password.
	hba := filepath.Join(srv.Dir(), "data", "pg_hba.conf")
	conf, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("host all pwuser 127.0.0.1/32 scram-sha-256\n"), conf...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Query(ctx, "test", `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the postmaster rereads the file on SIGHUP
	_, err = postgres.Open(context.Background(), "postgres://pwuser:s3cret@"+srv.Addr()+"/test?sslmode=disable")
	t.Logf("wrong password: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || strings.Contains(err.Error(), "s3cret") ||
		!strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("Open with a wrong password: %v; want ErrBackendUnavailable saying so, without the password", err)
	}

	_, err = postgres.Open(context.Background(), "postgres://host:notaport/db")
	t.Logf("malformed: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("malformed DSN: %v; want ErrInvalidOption", err)
	}

	_, err = dlock.Open(ctx, srv.TestDSN()+"&table=1bad")
	t.Logf("bad table: %v", err)
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("bad table: %v; want ErrInvalidOption", err)
	}

	_, err = dlock.Open(ctx, "postgres://u:pw@127.0.0.1:1/test?sslmode=disable")
	t.Logf("dlock.Open unreachable: %v", err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || strings.Contains(err.Error(), ":pw@") {
		t.Errorf("dlock.Open unreachable: %v", err)
	}

	// No connection left behind by the failures: only this query's own.
	rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "0" {
		t.Errorf("%s connections left open", rows[0][0])
	}
}

// TestURL opens through dlock.Open with both schemes and a table option.
func TestURL(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	u, _ := url.Parse(srv.TestDSN())
	for _, scheme := range []string{"postgres", "postgresql"} {
		u.Scheme = scheme
		c, err := dlock.Open(ctx, u.String()+"&table=url_locks&waiter_timeout=2s")
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Inspect(ctx, "")
		if err != nil || len(info) != 1 || info[0].Token != l.Token() {
			t.Errorf("Inspect: %+v, %v", info, err)
		}
		// The held lock's row is in the table the URL named.
		rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM url_locks WHERE owner <> ''`)
		if err != nil || rows[0][0] != "1" {
			t.Fatalf("url_locks while held: %v %v", rows, err)
		}
		l.Unlock(ctx)
		c.Close()
	}
	// Released, the name keeps no row.
	rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM url_locks`)
	if err != nil || rows[0][0] != "0" {
		t.Fatalf("url_locks after release: %v %v", rows, err)
	}
}

// TestMigrateConcurrent creates the tables from many connections at once.
func TestMigrateConcurrent(t *testing.T) {
	srv := testserver.Postgres(t)
	db, err := sql.Open("pgx", srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			errs <- postgres.Migrate(context.Background(), db, postgres.Table("mig_locks"))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_trigger WHERE tgname IN ('mig_locks_freed', 'mig_locks_waiters_left', 'mig_locks_fence', 'mig_locks_reclaim')`).Scan(&n); err != nil || n != 4 {
		t.Errorf("triggers: %d, %v", n, err)
	}
}

// TestNotifyWakes: a waiter on another Backend (another process, as far
// as in-process state goes) does not poll while the lock is held for
// long, and is woken by the release's NOTIFY at once.
func TestNotifyWakes(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	holder, err := postgres.Open(context.Background(), srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	cfg, err := pgxpool.ParseConfig(srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	cnt := new(counter)
	cfg.ConnConfig.Tracer = cnt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wb, err := postgres.NewPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := dlock.New(holder)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := dlock.New(wb)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	defer wc.Close()
	l, err := hc.Mutex("notify", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := wc.Mutex("notify", dlock.TTL(time.Minute)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // the waiter settles
	before := cnt.n.Load()
	time.Sleep(time.Second)
	if n := cnt.n.Load() - before; n > 2 {
		t.Errorf("the waiter sent %d statements in a second while the lock was held for a minute", n)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		t.Logf("hand-off to another Backend after %v", time.Since(released))
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after %d", l2.Token(), l.Token())
		}
		l2.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestNoMigrate: with NoMigrate (?migrate=false) Open checks the tables
// instead of creating them; missing, they are an error of Open that names
// them and says how to create them, and nothing is created.
func TestNoMigrate(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	for _, open := range []func() (dlock.Backend, error){
		func() (dlock.Backend, error) {
			return postgres.Open(context.Background(), srv.TestDSN(), postgres.Table("nm_locks"), postgres.NoMigrate())
		},
		func() (dlock.Backend, error) {
			c, err := dlock.Open(ctx, srv.TestDSN()+"&table=nm_locks&migrate=false")
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
	rows, err := srv.Query(ctx, "test", `SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'nm\_locks%'`)
	if err != nil || rows[0][0] != "0" {
		t.Fatalf("tables made under NoMigrate: %v, %v", rows, err)
	}
	if _, err := dlock.Open(ctx, srv.TestDSN()+"&migrate=maybe"); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "maybe") {
		t.Errorf("migrate=maybe: %v", err)
	}

	db, err := sql.Open("pgx", srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := postgres.Migrate(ctx, db, postgres.Table("nm_locks")); err != nil {
		t.Fatal(err)
	}
	b, err := postgres.Open(context.Background(), srv.TestDSN(), postgres.Table("nm_locks"), postgres.NoMigrate())
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
	_, errDB := postgres.New(nil)
	_, errPool := postgres.NewPool(nil, postgres.Table("9bad"))
	errMigrate := postgres.Migrate(context.Background(), nil)
	for _, c := range []struct {
		call string
		err  error
		want []string
	}{
		{"New(nil)", errDB, []string{"postgres: nil *sql.DB"}},
		{`NewPool(nil, Table("9bad"))`, errPool, []string{"postgres: nil *pgxpool.Pool", `"9bad"`}},
		{"Migrate(ctx, nil)", errMigrate, []string{"postgres: nil *sql.DB"}},
	} {
		if !errors.Is(c.err, dlock.ErrInvalidOption) {
			t.Errorf("%s: %v, want an error matching ErrInvalidOption", c.call, c.err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.call, c.err, w)
			}
		}
	}
}
