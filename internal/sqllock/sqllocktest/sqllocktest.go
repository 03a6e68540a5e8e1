// Package sqllocktest gives the SQL backends' tests what they share: the
// hook that plants foreign data in a lease table for the conformance
// suite's ForeignData item.
package sqllocktest

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// Foreign returns the [dlocktest.PlantForeign] option for a backend of
// dialect ("sqlite", "postgres" or "mysql") on the lease table table,
// planting rows through db. The garbage it plants is a token that is not
// an integer where the column takes any value (SQLite) and a negative
// token where it cannot; the top token is the dialect's largest. It
// keeps no idle connection in db, whose goroutines the suite's leak check
// would count.
func Foreign(db *sql.DB, dialect, table string) dlocktest.Option {
	db.SetMaxIdleConns(0)
	maxToken := int64(math.MaxInt64)
	if dialect == "mysql" {
		maxToken = 1<<43 - 1 // the token's bits in MySQL's packed grant (mysql.myMaxToken)
	}
	q := func(s string) string {
		s = strings.NewReplacer("{L}", table, "{W}", table+"_waiters").Replace(s)
		if dialect != "postgres" {
			return s
		}
		for n := 1; strings.Contains(s, "?"); n++ {
			s = strings.Replace(s, "?", "$"+strconv.Itoa(n), 1)
		}
		return s
	}
	plant := func(ctx context.Context, name string, kind dlocktest.ForeignKind) error {
		live := time.Now().Add(time.Hour).UnixMilli()
		var owner string
		var token, holds, expires any
		switch kind {
		case dlocktest.ForeignGarbage:
			owner, token, holds, expires = dlocktest.ForeignOwner, "not-a-token", 1, live
			if dialect != "sqlite" {
				token = -7
			}
		case dlocktest.ForeignMaxToken:
			owner, token, holds, expires = "", maxToken, 0, 0
		case dlocktest.ForeignBadCount:
			owner, token, holds, expires = dlocktest.ForeignOwner, 5, 0, live
		default:
			return fmt.Errorf("unknown kind %v", kind)
		}
		if _, err := db.ExecContext(ctx, q(`DELETE FROM {L} WHERE name = ?`), name); err != nil {
			return err
		}
		_, err := db.ExecContext(ctx, q(`INSERT INTO {L} (name, owner, holds, token, expires_at) VALUES (?, ?, ?, ?, ?)`),
			name, owner, holds, token, expires)
		return err
	}
	dump := func(ctx context.Context, name string) (string, error) {
		var b strings.Builder
		for _, s := range []string{
			`SELECT owner, token, holds, expires_at FROM {L} WHERE name = ?`,
			`SELECT seq, owner, expires_at FROM {W} WHERE name = ? ORDER BY seq`,
		} {
			rows, err := db.QueryContext(ctx, q(s), name)
			if err != nil {
				return "", err
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					rows.Close()
					return "", err
				}
				for i, v := range vals {
					if bs, ok := v.([]byte); ok {
						v = string(bs)
					}
					fmt.Fprintf(&b, "%s=%#v ", cols[i], v)
				}
				b.WriteString("; ")
			}
			if err := rows.Close(); err != nil {
				return "", err
			}
		}
		return "[" + b.String() + "]", nil
	}
	return dlocktest.PlantForeign(plant, dump)
}
