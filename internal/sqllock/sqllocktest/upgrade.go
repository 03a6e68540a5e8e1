package sqllocktest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Upgrade checks that a lease table of the dlock version before the fence
// table (lease rows kept forever, no fence table, no triggers) keeps
// working and that tokens do not go back across the upgrade: open with
// noMigrate must report the missing fence table; open with migration
// creates it with marks at the largest token, so that a name whose old
// row is reclaimed gets greater tokens than it ever had. It turns the
// tables of open's Backends into old ones through db; dialect is
// "sqlite", "postgres" or "mysql".
func Upgrade(t *testing.T, db *sql.DB, dialect, table string, open func(noMigrate bool) (dlock.Backend, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := open(false)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	q := func(s string) string {
		s = strings.NewReplacer("{L}", table, "{F}", table+"_fence").Replace(s)
		if dialect == "postgres" {
			s = strings.ReplaceAll(s, "?", "$1")
		}
		return s
	}
	old := []string{`DROP TRIGGER IF EXISTS {L}_fence`, `DROP TRIGGER IF EXISTS {L}_reclaim`, `DROP TABLE {F}`}
	if dialect == "postgres" {
		old = []string{`DROP TRIGGER IF EXISTS {L}_fence ON {L}`, `DROP TRIGGER IF EXISTS {L}_reclaim ON {L}`, `DROP TABLE {F}`}
	}
	// The old version's rows: free, with the tokens of their last grants.
	old = append(old, `INSERT INTO {L} (name, owner, holds, token, expires_at) VALUES ('up/a', '', 0, 41, 0)`,
		`INSERT INTO {L} (name, owner, holds, token, expires_at) VALUES ('up/b', '', 0, 7, 0)`)
	for _, s := range old {
		if _, err := db.ExecContext(ctx, q(s)); err != nil {
			t.Fatalf("%s: %v", q(s), err)
		}
	}
	if b, err := open(true); err == nil {
		b.Close()
		t.Fatal("open without migration on a table of the old version: no error; want the fence table reported missing")
	} else if !strings.Contains(err.Error(), table+"_fence") {
		t.Errorf("open without migration on a table of the old version: %v; want the fence table named", err)
	}
	b, err = open(false)
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, b)
	defer c.Close()
	// A name without a row starts above every token of the old table:
	// the marks start at its largest token (so that a row an operator
	// deleted before the upgrade, when no trigger kept its token, is
	// covered as long as some row had a token as large).
	last := map[string]uint64{"up/a": 41, "up/b": 7, "up/new": 41}
	for range 2 {
		for _, name := range []string{"up/new", "up/a", "up/b"} {
			l, err := c.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l.Token() <= last[name] {
				t.Errorf("%s: token %d after %d (the old row's, or a reclaimed one's)", name, l.Token(), last[name])
			}
			last[name] = l.Token()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := Count(ctx, db, table, "up/")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("after the upgrade, released names keep %d rows; want 0", n)
	}
}
