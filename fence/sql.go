package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock/internal/sqlident"
)

// ErrStale is matched (errors.Is) by the error of a write whose token is
// lower than one the resource has accepted: the writer's lease was lost.
var ErrStale = errors.New("fence: stale fencing token")

// StaleError says which token was refused and which was seen before.
type StaleError struct {
	Resource string
	Token    uint64 // the token refused
	Seen     uint64 // the highest token the resource has accepted
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: resource %q refuses token %d: token %d was already accepted (the writer's lease was lost)",
		e.Resource, e.Token, e.Seen)
}

// Is makes a *StaleError match ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Dialect is the SQL dialect of the protected database.
type Dialect int

// The dialects SQL knows.
const (
	// Postgres: PostgreSQL ($1 placeholders, INSERT … ON CONFLICT DO NOTHING).
	Postgres Dialect = iota
	// MySQL: MySQL and MariaDB (INSERT IGNORE).
	MySQL
	// SQLite: SQLite (INSERT OR IGNORE).
	SQLite
)

// DefaultTable is the guard table's name when none is given.
const DefaultTable = "dlock_fence"

// SQL is a guard for resources in an SQL database: it keeps, per
// resource name, the highest token accepted, in a table (resource, token,
// writes). It is safe for concurrent use.
type SQL struct {
	table               string
	d                   Dialect
	create, raise, seen string
}

// NewSQL returns a guard on the table of the given name (DefaultTable if
// empty: 1-64 ASCII letters, digits and '_', not starting with a digit)
// in a database of dialect d.
func NewSQL(d Dialect, table string) (*SQL, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := checkTable(table); err != nil {
		return nil, err
	}
	g := &SQL{table: table, d: d}
	resource := "TEXT NOT NULL PRIMARY KEY"
	if d == MySQL {
		resource = "VARBINARY(512) NOT NULL PRIMARY KEY"
	}
	g.create = `CREATE TABLE IF NOT EXISTS ` + table + ` (
	resource ` + resource + `,
	token    BIGINT NOT NULL,
	writes   BIGINT NOT NULL DEFAULT 0
)`
	// One upsert raises the token to max(stored, given), counts the
	// accepted writes, and locks the row until the transaction ends; the
	// token it leaves says whether ours was accepted.
	switch d {
	case Postgres:
		g.raise = `INSERT INTO ` + table + ` AS f (resource, token, writes) VALUES ($1, $2, 1)
ON CONFLICT (resource) DO UPDATE SET
	writes = CASE WHEN f.token <= EXCLUDED.token THEN f.writes + 1 ELSE f.writes END,
	token = GREATEST(f.token, EXCLUDED.token)
RETURNING token`
	case MySQL:
		// No RETURNING: a locking read of the row follows (a plain read
		// would see the transaction's snapshot, not the latest commit).
		// writes is assigned first, while token is still the old one.
		g.raise = `INSERT INTO ` + table + ` (resource, token, writes) VALUES (?, ?, 1)
ON DUPLICATE KEY UPDATE
	writes = IF(token <= VALUES(token), writes + 1, writes),
	token = GREATEST(token, VALUES(token))`
		g.seen = `SELECT token FROM ` + table + ` WHERE resource = ? FOR UPDATE`
	default:
		g.raise = `INSERT INTO ` + table + ` AS f (resource, token, writes) VALUES (?, ?, 1)
ON CONFLICT (resource) DO UPDATE SET
	writes = CASE WHEN f.token <= excluded.token THEN f.writes + 1 ELSE f.writes END,
	token = max(f.token, excluded.token)
RETURNING token`
	}
	return g, nil
}

func checkTable(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("fence: table name %q is longer than 64 characters", name)
	}
	if !sqlident.Plain(name) {
		return fmt.Errorf("fence: table name %q: only ASCII letters, digits and '_' are allowed, not starting with a digit", name)
	}
	return nil
}

// Table returns the guard table's name.
func (g *SQL) Table() string { return g.table }

// Execer is what Check and CreateTable run statements on: a *sql.Tx (for
// Check, the transaction of the guarded writes), *sql.Conn or *sql.DB.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CreateTable creates the guard table if it does not exist.
func (g *SQL) CreateTable(ctx context.Context, db Execer) error {
	if _, err := db.ExecContext(ctx, g.create); err != nil {
		return fmt.Errorf("fence: create table %s: %w", g.table, err)
	}
	return nil
}

// Check accepts token for resource in tx, the transaction that does the
// guarded writes, and must come before them: it raises the resource's
// token to token if token is not lower — one conditional upsert that
// keeps the row locked until tx ends (PostgreSQL, SQLite: one statement
// with RETURNING; MySQL: the upsert and a locking read) — and otherwise
// returns a *StaleError (matching ErrStale): then roll tx back. The first
// check of a resource inserts its row. Equal tokens are accepted: one
// lease may write many times.
func (g *SQL) Check(ctx context.Context, tx Execer, resource string, token uint64) error {
	if token > 1<<63-1 {
		return fmt.Errorf("fence: token %d does not fit a BIGINT", token)
	}
	t := int64(token)
	var (
		seen int64
		err  error
	)
	if g.seen == "" {
		err = tx.QueryRowContext(ctx, g.raise, resource, t).Scan(&seen)
	} else if _, err = tx.ExecContext(ctx, g.raise, resource, t); err == nil {
		err = tx.QueryRowContext(ctx, g.seen, resource).Scan(&seen)
	}
	if err != nil {
		return fmt.Errorf("fence: check token %d for %q: %w", token, resource, err)
	}
	if seen == t {
		return nil
	}
	return &StaleError{Resource: resource, Token: token, Seen: uint64(seen)}
}
