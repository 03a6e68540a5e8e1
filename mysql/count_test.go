package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
	gomysql "github.com/go-sql-driver/mysql"
)

// countingConnector counts the statements executed through its
// connections (each one round trip, with interpolateParams) at the
// database/sql driver interface.
type countingConnector struct {
	driver.Connector
	n atomic.Int64
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, n: &c.n}, nil
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

// countedBackend returns a Backend with opts on db, a pool on a new
// MariaDB whose statements cnt counts.
func countedBackend(t *testing.T, opts ...mysql.Option) (*mysql.Backend, *countingConnector, *sql.DB) {
	t.Helper()
	srv := testserver.MariaDB(t)
	mc, err := gomysql.ParseDSN(srv.DSN() + "?clientFoundRows=true&interpolateParams=true")
	if err != nil {
		t.Fatal(err)
	}
	base, err := gomysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	cnt := &countingConnector{Connector: base}
	db := sql.OpenDB(cnt)
	t.Cleanup(func() { db.Close() })
	b, err := mysql.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, cnt, db
}

// TestStatements counts the statements of an acquisition, a renewal and a
// release at the driver.
func TestStatements(t *testing.T) {
	b, cnt, _ := countedBackend(t)
	ctx := context.Background()
	req := dlock.Request{Name: "stmts", Owner: "o", TTL: 10 * time.Second}
	for range 2 { // prepare the statements first
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	measure := func(what string, want int64, fn func()) {
		before := cnt.n.Load()
		fn()
		n := cnt.n.Load() - before
		t.Logf("%s: %d statement(s)", what, n)
		if n != want {
			t.Errorf("%s took %d statements, want %d", what, n, want)
		}
	}
	var (
		g   dlock.Grant
		err error
	)
	// One INSERT … ON DUPLICATE KEY UPDATE, its result in the last-insert id.
	measure("acquire", 1, func() {
		if g, _, err = b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}
	measure("re-entry", 1, func() {
		g2, _, err := b.Acquire(ctx, req)
		if err != nil || g2.Token != g.Token || g2.Count != 2 {
			t.Fatalf("re-entry: %+v, %v; want token %d count 2", g2, err, g.Token)
		}
	})
	// A DELETE of the row as a last hold first (no match), then the UPDATE.
	measure("inner release", 2, func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
	other := dlock.Request{Name: req.Name, Owner: "other", TTL: time.Second}
	if _, _, err := b.Acquire(ctx, other); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("acquire by another owner while held: %v", err)
	}
	measure("renew", 1, func() {
		if err := b.Renew(ctx, h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	measure("renew in the same millisecond", 1, func() {
		if err := b.Renew(ctx, h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	// The last hold: one DELETE, the fence kept by its trigger.
	measure("release", 1, func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSessionStatements counts the statements of session mode at the
// driver.
func TestSessionStatements(t *testing.T) {
	b, cnt, db := countedBackend(t, mysql.Session())
	ctx := context.Background()
	req := dlock.Request{Name: "stmts", Owner: "o", TTL: 10 * time.Second}
	for range 2 { // warm up the pool
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
	}
	measure := func(what string, want int64, fn func()) {
		before := cnt.n.Load()
		fn()
		n := cnt.n.Load() - before
		t.Logf("%s: %d statement(s)", what, n)
		if n != want {
			t.Errorf("%s took %d statements, want %d", what, n, want)
		}
	}
	var (
		g, g2 dlock.Grant
		err   error
	)
	// INSERT … SELECT … WHERE GET_LOCK(key, 0) = 1 ON DUPLICATE KEY UPDATE,
	// then SET SESSION wait_timeout to the TTL, so that the server frees a
	// frozen holder's GET_LOCK at the TTL (issue 30 item 8).
	measure("acquire", 2, func() {
		if g, _, err = b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	h := dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}
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
	// The conditional upsert (no lock), the re-entry UPDATE (not the
	// owner's), the holder's row for the error.
	measure("try while held (refused, with the holder)", 3, func() {
		_, _, err := b.Acquire(ctx, dlock.Request{Name: req.Name, Owner: "other", TTL: time.Second})
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	})
	// One UPDATE that also calls RELEASE_LOCK, then wait_timeout back to
	// the server's for the pooled connection.
	measure("release", 2, func() {
		if err := b.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
	var free int
	if err := db.QueryRowContext(ctx, `SELECT IS_FREE_LOCK(?)`, mysql.SessionLockName(mysql.DefaultTable, req.Name)).Scan(&free); err != nil || free != 1 {
		t.Errorf("IS_FREE_LOCK after the release: %d, %v", free, err)
	}
}

// TestRenewBatchStatements: RenewBatch of 600 holds sharing a TTL is 3
// statements (256 holds each at most), not 600.
func TestRenewBatchStatements(t *testing.T) {
	b, cnt, _ := countedBackend(t)
	ctx := context.Background()
	var rs []dlock.Renewal
	for i := range 600 {
		req := dlock.Request{Name: fmt.Sprintf("rb%d", i), Owner: "o", TTL: time.Minute}
		g, _, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, dlock.Renewal{Hold: dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token}, TTL: time.Minute})
	}
	b.RenewBatch(ctx, rs) // prepares the statements
	before := cnt.n.Load()
	for i, err := range b.RenewBatch(ctx, rs) {
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
	}
	if n := cnt.n.Load() - before; n != 3 {
		t.Errorf("RenewBatch of %d holds took %d statements, want 3", len(rs), n)
	}
}
