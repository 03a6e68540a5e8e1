package sqllock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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

// Check reports whether every table the backend's statements use — the
// lease table, the waiters table and the fence table of the named lease
// table (DefaultTable if empty), and the dialect's own ([Dialect.Tables])
// — exists in db with the columns dlock uses and, where the dialect has
// privileges ([Dialect.Denied]), with the privileges the statements need,
// creating nothing: [New] runs it instead of [Migrate] under
// Config.NoMigrate, so that a missing table or grant is reported when the
// backend is opened rather than by its first acquisition or release. A
// table that exists but is not dlock's matches [dlock.ErrForeignData], a
// missing privilege [dlock.ErrBackendUnavailable]; both name the table.
func Check(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	e, table, err := schemaEngine(db, d, table)
	if err != nil {
		return err
	}
	missing, err := e.survey(ctx, table)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing; create %s with `dlock migrate` or Migrate (as a user that may create tables), or open without NoMigrate (migrate=false)",
			tableList(missing), pronoun(missing))
	}
	return e.checkPrivileges(ctx, table)
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
	return &Engine{db: db, d: d, table: table, local: NewLocal(nil)}, table, nil
}

// Table is one table of a lease table's set, with what dlock's statements
// use of it: its columns and the privileges an application user needs.
type Table struct {
	// Name is the table's name.
	Name string
	// Columns lists the columns the statements read, comma-separated.
	Columns string
	// InsertColumns lists the columns the statements insert; "" when
	// they are Columns.
	InsertColumns string
	// Privileges are those the statements need beyond SELECT, of
	// "INSERT", "UPDATE" and "DELETE".
	Privileges []string
	// Optional is set for a table that tables made by an earlier version
	// lack, and that nothing reads while it is missing (PostgreSQL's
	// watchers table, read by triggers made with it): [Check] does not
	// require it, but checks it where it exists.
	Optional bool
}

// Tables returns every table that the statements on lease table table use
// under dialect d, in the order they are checked: the lease table, the
// waiters table, the fence table, then the dialect's own.
func Tables(d Dialect, table string) []Table {
	all := []string{"INSERT", "UPDATE", "DELETE"}
	ts := []Table{
		{Name: table, Columns: "name, owner, holds, token, expires_at", Privileges: all},
		{Name: WaitersTable(table), Columns: "seq, name, owner, expires_at", InsertColumns: "name, owner, expires_at", Privileges: all},
		// The deletions' trigger raises a mark (PostgreSQL runs it with
		// the deleting user's privileges); MySQL locks the marks FOR
		// UPDATE before a deletion.
		{Name: FenceTable(table), Columns: "bucket, mark", Privileges: []string{"UPDATE"}},
	}
	if d.Tables != nil {
		ts = append(ts, d.Tables(table)...)
	}
	return ts
}

// survey checks every table of Tables that exists, changing nothing: it
// returns the names of those that do not exist, or an error naming each
// table that exists but is not dlock's (matching dlock.ErrForeignData) or
// that the user may not read (dlock.ErrBackendUnavailable).
func (e *Engine) survey(ctx context.Context, table string) (missing []string, err error) {
	var foreign, denied []string
	var causes []error
	for _, t := range Tables(e.d, table) {
		err := e.checkQueries(ctx, `SELECT `+t.Columns+` FROM `+t.Name+` WHERE 1 = 0`)
		switch {
		case err == nil:
		case e.d.Missing != nil && e.d.Missing(err):
			if !t.Optional {
				missing = append(missing, t.Name)
			}
		case e.d.Denied != nil && e.d.Denied(err):
			denied = append(denied, t.Name)
			causes = append(causes, err)
		case e.classify(err) != Other:
			return nil, err // unavailable, or ctx done: nothing is known
		default:
			foreign = append(foreign, t.Name)
			causes = append(causes, err)
		}
	}
	switch {
	case len(foreign) > 0:
		return nil, errorf(dlock.ErrForeignData, "%s exist%s but %s not a dlock table (%w); nothing was created or changed: use another table name (the Table option, ?table=)",
			tableList(foreign), verbS(foreign), isAre(foreign), errors.Join(causes...))
	case len(denied) > 0:
		return nil, e.denied(denied, "SELECT", errors.Join(causes...))
	}
	return missing, nil
}

// checkPrivileges checks that the user may run every kind of statement
// the backend runs on each table: a statement of that kind that matches
// no row (WHERE 1 = 0), which the database checks the privileges of and
// which changes nothing, fires no row trigger and locks no row. Dialects
// without Denied (SQLite) have no privileges to check.
func (e *Engine) checkPrivileges(ctx context.Context, table string) error {
	if e.d.Denied == nil {
		return nil
	}
	for _, t := range Tables(e.d, table) {
		for _, p := range t.Privileges {
			var q string
			switch p {
			case "INSERT":
				cols := cmp.Or(t.InsertColumns, t.Columns)
				q = `INSERT INTO ` + t.Name + ` (` + cols + `) SELECT ` + cols + ` FROM ` + t.Name + ` WHERE 1 = 0`
			case "UPDATE":
				col, _, _ := strings.Cut(cmp.Or(t.InsertColumns, t.Columns), ",")
				q = `UPDATE ` + t.Name + ` SET ` + col + ` = ` + col + ` WHERE 1 = 0`
			case "DELETE":
				q = `DELETE FROM ` + t.Name + ` WHERE 1 = 0`
			}
			err := e.retry(ctx, func(ctx context.Context) error {
				_, err := e.db.ExecContext(ctx, q)
				return err
			})
			switch {
			case err == nil:
			case t.Optional && e.d.Missing != nil && e.d.Missing(err):
			case e.d.Denied(err):
				return e.denied([]string{t.Name}, p, err)
			default:
				return fmt.Errorf("checking %s on table %s: %w", p, t.Name, e.wrap(err))
			}
		}
	}
	return nil
}

// denied is the error of a privilege missing on tables: it says so, and
// what the user needs.
func (e *Engine) denied(tables []string, priv string, err error) error {
	return errorf(dlock.ErrBackendUnavailable, "permission denied: the database user may not %s %s (%w); an application user needs %s (see the package doc, \"Privileges\")",
		priv, tableList(tables), err, e.grantList())
}

// grantList says which privileges an application user needs on which table.
func (e *Engine) grantList() string {
	var b strings.Builder
	for i, t := range Tables(e.d, e.table) {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strings.Join(append([]string{"SELECT"}, t.Privileges...), ", "))
		b.WriteString(" on ")
		b.WriteString(t.Name)
	}
	return b.String()
}

func tableList(ts []string) string {
	if len(ts) == 1 {
		return "table " + ts[0]
	}
	return "tables " + strings.Join(ts[:len(ts)-1], ", ") + " and " + ts[len(ts)-1]
}

func pronoun(ts []string) string {
	if len(ts) == 1 {
		return "it"
	}
	return "them"
}

func verbS(ts []string) string {
	if len(ts) == 1 {
		return "s"
	}
	return ""
}

func isAre(ts []string) string {
	if len(ts) == 1 {
		return "is"
	}
	return "are"
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

// The states of a holders table that Migrate finds.
const (
	holdersOK      = iota // every column
	holdersMissing        // no table: Migrate creates it
	holdersV1             // made before elections, no value column: Migrate adds it
	holdersNone           // the dialect has none
)

// holdersState checks the holders table of table, changing nothing: a
// table that exists but is not dlock's (or that the user may not read) is
// an error naming it, so that Migrate changes nothing.
func (e *Engine) holdersState(ctx context.Context, table string) (int, error) {
	if e.d.Weighted == nil {
		return holdersNone, nil
	}
	h := HoldersTable(table)
	err := e.checkQueries(ctx, holdersCheck(table))
	switch {
	case err == nil:
		return holdersOK, nil
	case e.d.Missing != nil && e.d.Missing(err):
		return holdersMissing, nil
	case e.d.Denied != nil && e.d.Denied(err):
		return 0, e.denied([]string{h}, "SELECT", err)
	case e.classify(err) != Other:
		return 0, err
	}
	if e.checkQueries(ctx, holdersCheckV1(table)) == nil {
		return holdersV1, nil
	}
	if e.d.Missing == nil {
		return holdersMissing, nil // CREATE TABLE IF NOT EXISTS leaves a foreign one as it is
	}
	return 0, errorf(dlock.ErrForeignData, "table %s exists but is not a dlock table (%w); nothing was created or changed: use another table name (the Table option, ?table=)", h, err)
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
// its rows exceeds, so tokens do not go back after the upgrade. The marks
// start at least at the dialect's FenceFloor.
func fenceInit(d Dialect, table string) string {
	var b strings.Builder
	for i := range max(d.Buckets, 1) {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d AS b", i)
	}
	floor := "0"
	if d.FenceFloor != nil {
		floor = strconv.FormatInt(d.FenceFloor(), 10)
	}
	ins, tail := d.InsertIgnore, ""
	if ins == "" {
		ins, tail = "INSERT INTO", " ON CONFLICT DO NOTHING"
	}
	return Bind(d, table)(ins + ` {F} (bucket, mark)
SELECT k.b, m.m FROM (` + b.String() + `) k,
	(SELECT ` + d.Max + `(COALESCE(MAX(l.token), 0), ` + floor + `) AS m FROM {L} l WHERE {OK}) m` + tail)
}

// Migrate creates the lease table, the waiters table and the fence table
// (with its triggers), and the dialect's own tables, of the named lease
// table (DefaultTable if empty) in db if they do not exist, fills in
// missing fence rows, and checks the tables as [Check] does. Before it
// creates or changes anything it checks every table that exists: if one
// is not dlock's, it reports each such table (matching
// [dlock.ErrForeignData]) and changes nothing, so no trigger is put on
// another program's table. The statements run in one transaction, which
// PostgreSQL and SQLite undo on failure; MySQL commits each CREATE, and a
// failure between them leaves the tables created so far (empty), which a
// later Migrate completes. It is safe to run from several processes at
// once: each statement is idempotent, and the transaction serializes them
// (PostgreSQL's takes an advisory lock). Busy errors are retried until
// ctx is done.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	e, table, err := schemaEngine(db, d, table)
	if err != nil {
		return err
	}
	if _, err := e.survey(ctx, table); err != nil {
		return err
	}
	holders, err := e.holdersState(ctx, table)
	if err != nil {
		return err
	}
	stmts := append(d.Schema(table, WaitersTable(table)), d.Reclaim(table, WaitersTable(table), FenceTable(table))...)
	stmts = append(stmts, fenceInit(d, table))
	err = e.write(ctx, func(ctx context.Context) error {
		return e.tx(ctx, func(c *sql.Conn) error {
			for _, q := range stmts {
				if _, err := c.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		if d.Denied != nil && d.Denied(err) {
			return fmt.Errorf("permission denied: create the tables %s, %s and %s and their triggers: %w; run `dlock migrate` or Migrate as a user that may, and open with NoMigrate (migrate=false)",
				table, WaitersTable(table), FenceTable(table), e.wrap(err))
		}
		return fmt.Errorf("create the tables %s, %s and %s: %w", table, WaitersTable(table), FenceTable(table), e.wrap(err))
	}
	// What another process may have created meanwhile is checked again.
	missing, err := e.survey(ctx, table)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s missing after they were created", tableList(missing))
	}
	// The holders table of weighted grants, only when missing or made
	// before elections: DDL on a table in use waits for the transactions
	// that read it (MySQL's metadata locks), which may wait for this one.
	var hs []string
	switch holders {
	case holdersMissing:
		hs = d.Weighted(table, WaitersTable(table), HoldersTable(table))
	case holdersV1:
		hs = d.AddValue(table, WaitersTable(table), HoldersTable(table))
	}
	if len(hs) > 0 {
		err := e.write(ctx, func(ctx context.Context) error {
			return e.tx(ctx, func(c *sql.Conn) error {
				for _, q := range hs {
					if _, err := c.ExecContext(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
		})
		// Another process may have completed it meanwhile (MySQL and
		// SQLite have no ADD COLUMN IF NOT EXISTS).
		if err != nil && e.checkQueries(ctx, holdersCheck(table)) != nil {
			return fmt.Errorf("create the holders table %s: %w", HoldersTable(table), e.wrap(err))
		}
	}
	return e.checkPrivileges(ctx, table)
}
