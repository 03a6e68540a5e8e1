package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// TestConnectTimeout: connect_timeout bounds how long Open waits for a
// database file that another connection keeps locked, and the error says
// so. Before, the parameter was refused as unknown.
func TestConnectTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck // the test is over

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	c, err := dlock.Open(ctx, "sqlite://"+path+"?connect_timeout=300ms&busy_timeout=50ms")
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Open of a locked database succeeded")
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "connect_timeout 300ms passed") {
		t.Errorf("want ErrBackendUnavailable saying the connect_timeout passed")
	}
	if took > 10*time.Second {
		t.Errorf("Open took %v with connect_timeout=300ms", took)
	}
}
