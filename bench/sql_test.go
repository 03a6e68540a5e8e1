package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"cirello.io/pglock"
	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
	"github.com/dlock-dev/dlock/postgres"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
)

// BenchmarkPostgres runs the dlocktest workloads (default and fair) on
// dlock's postgres backend against one PostgreSQL server — the one at
// PG_DSN, or one started for the run — each locker with its own Backend
// (its own pool and LISTEN connection). A Statements sub-benchmark
// reports the statements pgx sends per uncontended acquire
// (stmts/acquire) and per release (stmts/release).
//
// The "dlock-session" rows are the same in session mode (postgres.Session:
// an advisory lock on a connection of its own per held lock, and per name
// and process waiting). The "pglock" rows are cirello.io/pglock with its defaults (a
// 20 s lease, a heartbeat every 5 s, and a waiter that sleeps a whole lease
// between attempts), each locker with its own *sql.DB over lib/pq keeping
// 64 idle connections, in the same run on the same server.
//
//	cd bench && go test -run XXX -bench 'Postgres|MariaDB' -benchtime 2000x
func BenchmarkPostgres(b *testing.B) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		dsn = testserver.Postgres(b).TestDSN()
	}
	defer b.Run("pglock", func(b *testing.B) { benchPglock(b, dsn) })
	for _, mode := range []struct {
		name string
		opts []postgres.Option
	}{{"dlock", nil}, {"dlock-session", []postgres.Option{postgres.Session()}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.Run("Statements", func(b *testing.B) {
				cfg, err := pgxpool.ParseConfig(dsn)
				if err != nil {
					b.Fatal(err)
				}
				cnt := new(pgCounter)
				cfg.ConnConfig.Tracer = cnt
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				be, err := postgres.NewPool(pool, mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				statements(b, be, &cnt.n)
			})
			// Backends as postgres.Open makes them, on pgx's database/sql
			// driver, with their statements counted.
			cnt := new(pgCounter)
			dlocktest.Bench(b, func(t testing.TB) dlock.Backend {
				pc, err := pgx.ParseConfig(dsn)
				if err != nil {
					t.Fatal(err)
				}
				pc.Tracer = cnt
				db := stdlib.OpenDB(*pc)
				openPool(db, mode.name)
				be, err := postgres.New(db, mode.opts...)
				if err != nil {
					db.Close()
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() }) // after the Client's Close
				return be
			}, sqlScale(mode.name, &cnt.n)...)
		})
	}
}

// BenchmarkMariaDB runs the same workloads on dlock's mysql backend
// against one MariaDB server — the one at MYSQL_DSN (a go-sql-driver DSN),
// or one started for the run. Statements are counted at the database/sql
// driver interface. "dlock-session" is session mode (mysql.Session:
// GET_LOCK on a connection of its own per held lock, and per name and
// process waiting).
func BenchmarkMariaDB(b *testing.B) {
	dsn := os.Getenv("MYSQL_DSN")
	if dsn == "" {
		dsn = testserver.MariaDB(b).DSN()
	}
	for _, mode := range []struct {
		name string
		opts []mysql.Option
	}{{"dlock", nil}, {"dlock-session", []mysql.Option{mysql.Session()}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.Run("Statements", func(b *testing.B) {
				mc, err := gomysql.ParseDSN(dsn)
				if err != nil {
					b.Fatal(err)
				}
				mc.ClientFoundRows, mc.InterpolateParams = true, true
				base, err := gomysql.NewConnector(mc)
				if err != nil {
					b.Fatal(err)
				}
				cnt := &countingConnector{Connector: base}
				db := sql.OpenDB(cnt)
				defer db.Close()
				be, err := mysql.New(db, mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				statements(b, be, &cnt.n)
			})
			// Backends as mysql.Open makes them, with their statements
			// counted.
			var cnt atomic.Int64
			dlocktest.Bench(b, func(t testing.TB) dlock.Backend {
				mc, err := gomysql.ParseDSN(dsn)
				if err != nil {
					t.Fatal(err)
				}
				mc.ClientFoundRows, mc.InterpolateParams = true, true
				base, err := gomysql.NewConnector(mc)
				if err != nil {
					t.Fatal(err)
				}
				db := sql.OpenDB(&countingConnector{Connector: base, total: &cnt})
				openPool(db, mode.name)
				be, err := mysql.New(db, mode.opts...)
				if err != nil {
					db.Close()
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() }) // after the Client's Close
				return be
			}, sqlScale(mode.name, &cnt)...)
		})
	}
}

// openPool sizes db as the postgres and mysql backends' Open does in the
// mode (see postgres.PoolMaxConns).
func openPool(db *sql.DB, mode string) {
	db.SetMaxIdleConns(postgres.DefaultPoolMaxConns)
	if mode != "dlock-session" {
		db.SetMaxOpenConns(postgres.DefaultPoolMaxConns)
	}
}

// sqlScale is the options of the scale workloads for a mode of a SQL
// backend, whose statements n counts. Session mode holds a connection per
// held lease, so it runs no Held: the servers allow 100 (PostgreSQL) and
// 151 (MariaDB) connections by default. Its waiters take one connection
// per name and process, so it runs every Herd.
func sqlScale(mode string, n *atomic.Int64) []dlocktest.BenchOption {
	opts := []dlocktest.BenchOption{dlocktest.StoreRequests(n.Load)}
	if mode == "dlock-session" {
		opts = append(opts, dlocktest.HeldSizes())
	}
	return opts
}

// benchPglock runs the workloads and the statement count on
// cirello.io/pglock.
func benchPglock(b *testing.B, dsn string) {
	// newClient returns a pglock client on its own *sql.DB, whose
	// statements cnt counts.
	newClient := func(b *testing.B) (c *pglock.Client, cnt *countingConnector) {
		pqc, err := pq.NewConnector(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cnt = &countingConnector{Connector: pqc}
		db := sql.OpenDB(cnt)
		// database/sql keeps 2 idle connections by default; an
		// application running 32 goroutines on pglock would raise it
		// (issue 17 measured the peers with 64).
		db.SetMaxIdleConns(64)
		b.Cleanup(func() { db.Close() })
		c, err = pglock.New(db, pglock.WithCustomTable("dlockbench_pglock"))
		if err != nil {
			b.Fatal(err)
		}
		return c, cnt
	}
	if c, _ := newClient(b); c.TryCreateTable() != nil {
		b.Fatal(c.TryCreateTable())
	}
	b.Run("Statements", func(b *testing.B) {
		c, cnt := newClient(b)
		n := &cnt.n
		var acq, rel int64
		for i := range b.N + 2 {
			before := n.Load()
			l, err := c.Acquire("dlockbench/statements")
			if err != nil {
				b.Fatal(err)
			}
			mid := n.Load()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			if i >= 2 {
				acq += mid - before
				rel += n.Load() - mid
			}
		}
		b.ReportMetric(float64(acq)/float64(b.N), "stmts/acquire")
		b.ReportMetric(float64(rel)/float64(b.N), "stmts/release")
	})
	// pglock's waiters sleep between attempts, so its Contended workloads
	// run for a time, not for b.N grants (see dlocktest.BenchLockersFor).
	dlocktest.BenchLockersFor(b, func(b *testing.B) dlocktest.Locker {
		c, _ := newClient(b)
		return pglockLocker{c}
	}, pglockContended)
}

// pglockContended is how long pglock's Contended and Contended64 measure:
// each of its hand-offs waits out a waiter's sleep, so a few seconds
// measure a few grants, which the rows report as grants/s and changes/s
// over the whole run. The Locks still waiting a second after it ends are
// given up (dlocktest's timed span), so a run takes about 11 s, not the
// hours that b.N grants could take.
const pglockContended = 10 * time.Second

// pglockLocker is cirello.io/pglock's blocking Acquire and its Release.
type pglockLocker struct{ c *pglock.Client }

func (l pglockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lk, err := l.c.AcquireContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return l.c.ReleaseContext(ctx, lk) }, nil
}

// statements measures the statements of b.N uncontended acquisitions and
// releases on be, counted by n.
func statements(b *testing.B, be dlock.Backend, n *atomic.Int64) {
	ctx := context.Background()
	req := dlock.Request{Name: "dlockbench/statements", Owner: "bench", TTL: 30 * time.Second}
	var acq, rel int64
	for i := range b.N + 2 {
		before := n.Load()
		g, _, err := be.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		mid := n.Load()
		if err := be.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}); err != nil {
			b.Fatal(err)
		}
		if i >= 2 { // the first rounds prepare the statements
			acq += mid - before
			rel += n.Load() - mid
		}
	}
	b.ReportMetric(float64(acq)/float64(b.N), "stmts/acquire")
	b.ReportMetric(float64(rel)/float64(b.N), "stmts/release")
}

// pgCounter counts the statements pgx sends.
type pgCounter struct{ n atomic.Int64 }

func (c *pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingConnector counts the statements executed through its
// connections at the database/sql driver interface.
type countingConnector struct {
	driver.Connector
	n     atomic.Int64
	total *atomic.Int64 // if not nil, counts instead of n
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	n := c.total
	if n == nil {
		n = &c.n
	}
	return &countingConn{Conn: conn, n: n}, nil
}

type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, n: c.n}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.Add(1)
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type countingStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.Add(1)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.Add(1)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
