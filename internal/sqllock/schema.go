package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqlident"
)

// DefaultTable is the lease table's name when none is configured.
const DefaultTable = "dlock_locks"

// MaxTableLen is the longest lease table name: the waiters table and its
// index add "_waiters_name" and must stay within MySQL's 64 characters.
const MaxTableLen = 48

// CheckTable reports whether name can be a lease table's name: 1 to
// [MaxTableLen] ASCII letters, digits and underscores, not starting with a
// digit. Names are written into statements, so nothing else is accepted.
func CheckTable(name string) error {
	if name == "" || len(name) > MaxTableLen {
		return errorf(dlock.ErrInvalidOption, "table name %q must be 1-%d characters", name, MaxTableLen)
	}
	if !sqlident.Plain(name) {
		return errorf(dlock.ErrInvalidOption, "table name %q: only ASCII letters, digits and '_' are allowed, not starting with a digit", name)
	}
	return nil
}

// Check reports whether the lease table, the waiters table and the fence
// table of the named lease table (DefaultTable if empty) exist in db with the columns dlock
// uses, creating nothing: [New] runs it instead of [Migrate] under
// Config.NoMigrate, so that a missing table is reported when the backend
// is opened rather than by its first acquisition.
func Check(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	e, table, err := schemaEngine(db, d, table)
	if err != nil {
		return err
	}
	if err := e.check(ctx, table); err != nil {
		return fmt.Errorf("the tables %s, %s and %s are missing or not dlock's (%w); create them with `dlock migrate` or Migrate, or open without NoMigrate", table, WaitersTable(table), FenceTable(table), err)
	}
	return nil
}

// schemaEngine returns the engine that Check and Migrate run their
// statements through, and the checked table name (DefaultTable if empty).
func schemaEngine(db *sql.DB, d Dialect, table string) (*Engine, string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table); err != nil {
		return nil, "", err
	}
	return &Engine{db: db, d: d, local: NewLocal(nil)}, table, nil
}

// check selects no row, but every column dlock uses, from the three
// tables.
func (e *Engine) check(ctx context.Context, table string) error {
	checkW := `SELECT seq, name, owner, expires_at FROM ` + WaitersTable(table) + ` WHERE 1 = 0`
	checkF := `SELECT bucket, mark FROM ` + FenceTable(table) + ` WHERE 1 = 0`
	return e.checkQueries(ctx, leaseCheck(table), checkW, checkF)
}

// leaseCheck selects no row, but every column dlock uses, from the lease
// table.
func leaseCheck(table string) string {
	return `SELECT name, owner, holds, token, expires_at FROM ` + table + ` WHERE 1 = 0`
}

func (e *Engine) checkQueries(ctx context.Context, qs ...string) error {
	for _, q := range qs {
		err := e.retry(ctx, func(ctx context.Context) error {
			rows, err := e.db.QueryContext(ctx, q)
			if err != nil {
				return err
			}
			return rows.Close()
		})
		if err != nil {
			return e.wrap(err)
		}
	}
	return nil
}

// WaitersTable returns the name of the waiters table of lease table table.
func WaitersTable(table string) string { return table + "_waiters" }

// FenceTable returns the name of the fence table of lease table table: a
// constant number of rows (Dialect.Buckets), each the high-water mark of
// the tokens of the deleted lease rows of its names.
func FenceTable(table string) string { return table + "_fence" }

// fenceInit returns the statement that adds the fence rows that are
// missing, each with the largest token in the lease table: a table from
// a version of dlock that kept every row gets marks that no token of
// its rows exceeds, so tokens do not go back after the upgrade.
func fenceInit(d Dialect, table string) string {
	var b strings.Builder
	for i := range max(d.Buckets, 1) {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d AS b", i)
	}
	ins, tail := d.InsertIgnore, ""
	if ins == "" {
		ins, tail = "INSERT INTO", " ON CONFLICT DO NOTHING"
	}
	return Bind(d, table)(ins + ` {F} (bucket, mark)
SELECT k.b, m.m FROM (` + b.String() + `) k,
	(SELECT COALESCE(MAX(l.token), 0) AS m FROM {L} l WHERE {OK}) m` + tail)
}

// Migrate creates the lease table, the waiters table and the fence table
// (with its triggers) of the named lease table (DefaultTable if empty) in
// db if they do not exist, fills in missing fence rows, and checks
// that an existing lease table has the expected columns (before it puts
// the fence's triggers on it). It is safe to run from several processes at
// once: the tables, then the fence, are created in writing transactions
// that the others wait for, each statement idempotent. Busy errors are
// retried until ctx is done.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	e, table, err := schemaEngine(db, d, table)
	if err != nil {
		return err
	}
	run := func(stmts []string) error {
		return e.write(ctx, func(ctx context.Context) error {
			return e.tx(ctx, func(c *sql.Conn) error {
				for _, q := range stmts {
					if _, err := c.ExecContext(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	if err := run(d.Schema(table, WaitersTable(table))); err != nil {
		return fmt.Errorf("create the tables %s and %s: %w", table, WaitersTable(table), e.wrap(err))
	}
	// A table of that name that is not ours is reported here, before the
	// fence's triggers are put on it, rather than by the first acquisition.
	if err := e.checkQueries(ctx, leaseCheck(table)); err != nil {
		return fmt.Errorf("table %s exists but is not a dlock table (%w)", table, err)
	}
	// The schema's statements again first: they are idempotent, and they
	// serialize concurrent migrations (PostgreSQL's take an advisory lock
	// for the transaction) that would otherwise race on the triggers.
	fence := append(d.Schema(table, WaitersTable(table)), d.Reclaim(table, WaitersTable(table), FenceTable(table))...)
	fence = append(fence, fenceInit(d, table))
	if err := run(fence); err != nil {
		return fmt.Errorf("create the fence table %s: %w", FenceTable(table), e.wrap(err))
	}
	// Only when missing: DDL on a table in use waits for the transactions
	// that read it (MySQL's metadata locks), which may wait for this one.
	if d.Weighted != nil && e.checkQueries(ctx, holdersCheck(table)) != nil {
		if err := run(d.Weighted(table, WaitersTable(table), HoldersTable(table))); err != nil {
			return fmt.Errorf("create the holders table %s: %w", HoldersTable(table), e.wrap(err))
		}
	}
	if err := e.check(ctx, table); err != nil {
		return fmt.Errorf("table %s exists but is not a dlock table (%w)", table, err)
	}
	return nil
}
