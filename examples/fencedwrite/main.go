// Command fencedwrite shows why a lock needs a fencing token: the holder
// writes to PostgreSQL in a transaction that first checks its token with
// fence.SQL, so a holder whose lease was lost (a pause, a partition) and a
// later holder cannot both write — the resource refuses the older token.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./fencedwrite
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fence"
	_ "github.com/dlock-dev/dlock/postgres"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		log.Fatal("set DATABASE_URL to a PostgreSQL database")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ledger (id text PRIMARY KEY, balance bigint)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO ledger VALUES ('acct', 0) ON CONFLICT (id) DO UPDATE SET balance = 0`); err != nil {
		log.Fatal(err)
	}
	guard, err := fence.NewSQL(fence.Postgres, "")
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}

	// The lock lives in the same database (it could be any store).
	c, err := dlock.Open(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m := c.Mutex("ledger/acct", dlock.TTL(time.Second))

	deposit := func(l *dlock.Lease, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Check(ctx, tx, "ledger/acct", l.Token()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE ledger SET balance = balance + $1 WHERE id = 'acct'`, amount); err != nil {
			return err
		}
		return tx.Commit()
	}

	first, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := deposit(first, 10); err != nil {
		log.Fatal(err)
	}
	// The first holder stalls: it stops renewing, as a paused process
	// would, and its lease runs out; a second holder gets the lock.
	first.Unlock(ctx)
	second, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(context.Background())
	if err := deposit(second, 20); err != nil {
		log.Fatal(err)
	}
	// The first holder wakes up and writes with its old token: refused.
	err = deposit(first, 1000)
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStale))
	var balance int
	db.QueryRowContext(ctx, `SELECT balance FROM ledger WHERE id = 'acct'`).Scan(&balance)
	fmt.Println("second token above the first:", second.Token() > first.Token())
	fmt.Println("balance:", balance)
}
