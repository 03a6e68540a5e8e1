package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock/fence"
	_ "modernc.org/sqlite"
)

// A guarded write: the check and the write are one transaction, and a
// writer whose lease was lost (a lower token than one already accepted)
// is refused before it writes. In real code the token is lease.Token().
func ExampleSQL() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)`)
	db.Exec(`INSERT INTO accounts VALUES ('alice', 100)`)

	guard, err := fence.NewSQL(fence.SQLite, "")
	if err != nil {
		panic(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil {
		panic(err)
	}

	deposit := func(token uint64, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Check(ctx, tx, "accounts/alice", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = 'alice'`, amount); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println(deposit(6, 10)) // a holder with token 6
	fmt.Println(deposit(7, 20)) // the next holder, token 7
	err = deposit(6, 1000)      // the first holder resumes after a pause: its lease is lost
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var balance int
	db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// <nil>
	// <nil>
	// true fence: resource "accounts/alice" refuses token 6: token 7 was already accepted (the writer's lease was lost)
	// balance: 130
}
