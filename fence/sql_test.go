package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/dlock-dev/dlock/fence"
	"github.com/dlock-dev/dlock/internal/testserver"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exercise checks a guard on db: increasing and equal tokens pass, a
// lower one is refused and its write rolled back, and concurrent writers
// with random tokens leave the highest accepted token and no write of a
// token lower than an earlier committed one.
func exercise(t *testing.T, db *sql.DB, d fence.Dialect) {
	ctx := context.Background()
	g, err := fence.NewSQL(d, "test_fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx, db); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	check := func(res string, token uint64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := g.Check(ctx, tx, res, token); err != nil {
			return err
		}
		return tx.Commit()
	}
	for _, c := range []struct {
		token uint64
		stale bool
	}{{5, false}, {5, false}, {9, false}, {3, true}, {8, true}, {9, false}, {10, false}} {
		err := check("r", c.token)
		if c.stale != errors.Is(err, fence.ErrStale) || (!c.stale && err != nil) {
			t.Errorf("token %d: %v (want stale: %v)", c.token, err, c.stale)
		}
	}
	// A check in a transaction that rolls back leaves nothing.
	tx, _ := db.BeginTx(ctx, nil)
	if err := g.Check(ctx, tx, "r", 50); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if err := check("r", 11); err != nil {
		t.Errorf("after a rolled-back raise to 50, token 11: %v", err)
	}

	// Concurrent writers: every committed write's token is >= every
	// token committed before it.
	if d == fence.SQLite {
		return // one connection: nothing runs concurrently
	}
	var (
		mu        sync.Mutex
		committed []uint64
		wg        sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				token := uint64(100 + (i*7+w*13)%60)
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				err = g.Check(ctx, tx, "c", token)
				if err == nil {
					mu.Lock() // the commit order is the order of this list
					if err := tx.Commit(); err != nil {
						t.Error(err)
					}
					committed = append(committed, token)
					mu.Unlock()
					continue
				}
				tx.Rollback()
				if !errors.Is(err, fence.ErrStale) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(committed); i++ {
		if committed[i] < committed[i-1] {
			t.Fatalf("token %d committed after %d", committed[i], committed[i-1])
		}
	}
	t.Logf("%d of 200 concurrent writes accepted", len(committed))
}

func TestSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	exercise(t, db, fence.SQLite)
}

func TestPostgres(t *testing.T) {
	srv := testserver.Postgres(t)
	db, err := sql.Open("pgx", srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exercise(t, db, fence.Postgres)
}

func TestMariaDB(t *testing.T) {
	srv := testserver.MariaDB(t)
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exercise(t, db, fence.MySQL)
}

func TestBadTable(t *testing.T) {
	if _, err := fence.NewSQL(fence.Postgres, "x; DROP TABLE y"); err == nil {
		t.Error("NewSQL accepted a table name with SQL in it")
	}
}
