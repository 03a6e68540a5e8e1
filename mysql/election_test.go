package mysql_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// TestMigrateAddsValue: a holders table made before elections (no value
// column) gets the column when the Backend opens, its rows kept; an
// election then publishes its value.
func TestMigrateAddsValue(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	db := callerDB(t, srv.DSN())
	if _, err := db.Exec(`CREATE TABLE old_locks_holders (name VARBINARY(512) NOT NULL, owner VARBINARY(1024) NOT NULL,
	weight INT NOT NULL, holds INT NOT NULL, token BIGINT NOT NULL, expires_at BIGINT NOT NULL,
	PRIMARY KEY (name, owner), KEY old_locks_holders_expires (expires_at)) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO old_locks_holders VALUES ('old', 'o', 1, 1, 1, 0)`); err != nil {
		t.Fatal(err)
	}
	b, err := mysql.Open(ctx, srv.DSN(), mysql.Table("old_locks"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var v string
	if err := db.QueryRow(`SELECT value FROM old_locks_holders WHERE name = 'old'`).Scan(&v); err != nil || v != "" {
		t.Fatalf("the old row after Migrate: value %q, %v", v, err)
	}
	e := c.Election("e")
	l, err := e.Campaign(ctx, "here")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "here" || ld.Term != l.Token() {
		t.Fatalf("Leader: %+v, %v", ld, err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatalf("a second Migrate: %v", err)
	}
}
