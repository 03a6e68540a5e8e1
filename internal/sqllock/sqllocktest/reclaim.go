package sqllocktest

import (
	"context"
	"database/sql"
	"strings"

	"github.com/dlock-dev/dlock/dlocktest"
)

// Reclaim returns the [dlocktest.Reclaim] option for a backend on the
// lease table table: reclaim forces a sweep (a Backend's Reclaim method),
// and the count is the rows of the lease table and the waiters table
// whose names start with the prefix, read through db.
func Reclaim(db *sql.DB, table string, reclaim func(context.Context) (int, error)) dlocktest.Option {
	db.SetMaxIdleConns(0)
	return dlocktest.Reclaim(func(ctx context.Context) error {
		_, err := reclaim(ctx)
		return err
	}, func(ctx context.Context, prefix string) (int, error) {
		return Count(ctx, db, table, prefix)
	})
}

// Count returns the number of rows of the lease table table and of its
// waiters table whose names start with prefix.
func Count(ctx context.Context, db *sql.DB, table, prefix string) (int, error) {
	n := 0
	for _, t := range []string{table, table + "_waiters"} {
		rows, err := db.QueryContext(ctx, `SELECT name FROM `+t)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			var name []byte
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return 0, err
			}
			if strings.HasPrefix(string(name), prefix) {
				n++
			}
		}
		if err := rows.Close(); err != nil {
			return 0, err
		}
	}
	return n, nil
}
