package sqllocktest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Objects lists, sorted, the tables of the database that db is connected
// to (its current schema on PostgreSQL), the triggers as
// "trigger:TABLE.NAME" and PostgreSQL's functions as "function:NAME":
// what a migration creates. dialect is "sqlite", "postgres" or "mysql".
func Objects(ctx context.Context, db *sql.DB, dialect string) ([]string, error) {
	var qs []string
	switch dialect {
	case "sqlite":
		qs = []string{`SELECT CASE type WHEN 'trigger' THEN 'trigger:' || tbl_name || '.' || name ELSE name END
			FROM sqlite_master WHERE type IN ('table', 'trigger') AND name NOT LIKE 'sqlite_%'`}
	case "postgres":
		qs = []string{
			`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
			`SELECT 'trigger:' || event_object_table || '.' || trigger_name FROM information_schema.triggers WHERE trigger_schema = current_schema()`,
			`SELECT 'function:' || routine_name FROM information_schema.routines WHERE routine_schema = current_schema()`,
		}
	case "mysql":
		qs = []string{
			`SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`,
			`SELECT CONCAT('trigger:', event_object_table, '.', trigger_name) FROM information_schema.triggers WHERE trigger_schema = DATABASE()`,
		}
	default:
		return nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	var all []string
	for _, q := range qs {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return nil, err
			}
			all = append(all, s)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	slices.Sort(all)
	return all, nil
}

// ForeignSchema checks that opening a Backend over tables that are not
// dlock's — another library's "locks" table (cirello.io/pglock's schema),
// or a foreign table in the place of the waiters or the fence table —
// fails with dlock.ErrForeignData naming that table, and creates or
// changes nothing: the tables, triggers and functions of the database are
// those before. open opens a Backend on the lease table named; db is an
// administrator's connection to the same database.
func ForeignSchema(t *testing.T, dialect string, db *sql.DB, open func(ctx context.Context, table string) (dlock.Backend, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bytea := map[string]string{"sqlite": "BLOB", "postgres": "BYTEA", "mysql": "BLOB"}[dialect]
	for _, tc := range []struct {
		name, table, foreign, create string
	}{
		// cirello.io/pglock's schema, as its users have it.
		{"pglock", "locks", "locks", `CREATE TABLE locks (name CHARACTER VARYING(255) PRIMARY KEY,
	record_version_number BIGINT, data ` + bytea + `, owner CHARACTER VARYING(255))`},
		{"waiters", "wl", "wl_waiters", `CREATE TABLE wl_waiters (id INTEGER PRIMARY KEY, name CHARACTER VARYING(255))`},
		{"fence", "fl", "fl_fence", `CREATE TABLE fl_fence (id INTEGER PRIMARY KEY)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.ExecContext(ctx, tc.create); err != nil {
				t.Fatal(err)
			}
			before, err := Objects(ctx, db, dialect)
			if err != nil {
				t.Fatal(err)
			}
			b, err := open(ctx, tc.table)
			if err == nil {
				b.Close()
				t.Fatalf("Open on the foreign table %s: no error", tc.foreign)
			}
			t.Logf("Open: %v", err)
			if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), "table "+tc.foreign+" ") {
				t.Errorf("Open: %v; want ErrForeignData naming table %s", err, tc.foreign)
			}
			after, err := Objects(ctx, db, dialect)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("Open changed the schema:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

// Grant is a privilege an application user needs on a table.
type Grant struct{ Privilege, Table string }

// Privileges checks that an application user with exactly the grants
// (on tables an administrator migrated; see the package docs) can lock,
// wait fairly, and release, in both modes, and that a user without any
// one of them is refused when it opens the Backend (NoMigrate), with an
// error saying "permission denied" and naming the table. grant and revoke
// run as the administrator; open opens a Backend as the user.
func Privileges(t *testing.T, grants []Grant, grant, revoke func(ctx context.Context, g Grant) error,
	open func(ctx context.Context, m Mode) (dlock.Backend, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, g := range grants {
		if err := grant(ctx, g); err != nil {
			t.Fatal(g, err)
		}
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			m := mode.m
			m.NoMigrate = true
			b, err := open(ctx, m)
			if err != nil {
				t.Fatalf("Open with the documented grants: %v", err)
			}
			c, err := dlock.New(b)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mu := c.Mutex("grants/"+mode.name, dlock.Fair(), dlock.TTL(time.Minute))
			first, err := mu.Lock(ctx)
			if err != nil {
				t.Fatalf("Lock: %v", err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := mu.Lock(ctx) // queues in the waiters table, then is woken
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			if !m.Session { // session mode's waiters wait in the server
				waitQueued(ctx, t, b, "grants/"+mode.name)
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("the waiter: %v", err)
				}
			case <-time.After(30 * time.Second): // far below the TTL of a minute
				t.Fatal("the waiter was not granted within 30 s of the release")
			}
		})
	}
	for _, g := range grants {
		t.Run("without "+g.Privilege+" on "+g.Table, func(t *testing.T) {
			if err := revoke(ctx, g); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := grant(ctx, g); err != nil {
					t.Fatal(err)
				}
			}()
			b, err := open(ctx, Mode{NoMigrate: true})
			if err == nil {
				b.Close()
				t.Fatalf("Open without %s on %s: no error", g.Privilege, g.Table)
			}
			if !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), " "+g.Table+" ") ||
				strings.Contains(err.Error(), "missing") {
				t.Errorf("Open without %s on %s: %v; want permission denied naming the table", g.Privilege, g.Table, err)
			}
		})
	}
}

// waitQueued waits (at most 30 s) until the lock name has a fair waiter
// queued.
func waitQueued(ctx context.Context, t *testing.T, b dlock.Backend, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		infos, err := b.(dlock.Inspector).Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 1 && infos[0].Queued > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter of %s queued within 30 s: %+v", name, infos)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
