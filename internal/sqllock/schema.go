package sqllock

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/dlock-dev/dlock"
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
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return errorf(dlock.ErrInvalidOption, "table name %q: only ASCII letters, digits and '_' are allowed, not starting with a digit", name)
		}
	}
	return nil
}

// Check reports whether the lease table and the waiters table of the named
// lease table (DefaultTable if empty) exist in db with the columns dlock
// uses, creating nothing: [New] runs it instead of [Migrate] under
// Config.NoMigrate, so that a missing table is reported when the backend
// is opened rather than by its first acquisition.
func Check(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table); err != nil {
		return err
	}
	e := &Engine{db: db, d: d, local: NewLocal(nil)}
	if err := e.check(ctx, table); err != nil {
		return fmt.Errorf("the tables %s and %s are missing or not dlock's (%w); create them with `dlock migrate` or Migrate, or open without NoMigrate", table, WaitersTable(table), err)
	}
	return nil
}

// check selects no row, but every column dlock uses, from both tables.
func (e *Engine) check(ctx context.Context, table string) error {
	check := `SELECT name, owner, holds, token, expires_at FROM ` + table + ` WHERE 1 = 0`
	checkW := `SELECT seq, name, owner, expires_at FROM ` + WaitersTable(table) + ` WHERE 1 = 0`
	for _, q := range []string{check, checkW} {
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

// Migrate creates the lease table and the waiters table of the named lease
// table (DefaultTable if empty) in db if they do not exist, and checks
// that an existing lease table has the expected columns. It is safe to
// run from several processes at once: the tables are created in one
// writing transaction that the others wait for. Busy errors are retried
// until ctx is done.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table); err != nil {
		return err
	}
	e := &Engine{db: db, d: d, local: NewLocal(nil)}
	err := e.write(ctx, func(ctx context.Context) error {
		return e.tx(ctx, func(c *sql.Conn) error {
			for _, q := range d.Schema(table, WaitersTable(table)) {
				if _, err := c.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("create the tables %s and %s: %w", table, WaitersTable(table), e.wrap(err))
	}
	// A table of that name that is not ours is reported here rather than
	// by the first acquisition.
	if err := e.check(ctx, table); err != nil {
		return fmt.Errorf("table %s exists but is not a dlock table (%w)", table, err)
	}
	return nil
}
