package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mysql"
)

func TestNewRefusesNilClient(t *testing.T) {
	_, err := mysql.New(nil)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql: nil *sql.DB") {
		t.Errorf("New(nil): %v, want an error matching ErrInvalidOption that says \"mysql: nil *sql.DB\"", err)
	}
	err = mysql.Migrate(context.Background(), nil, mysql.Table("a-b"))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "mysql: nil *sql.DB") || !strings.Contains(err.Error(), `"a-b"`) {
		t.Errorf("Migrate(ctx, nil, Table(\"a-b\")): %v, want an error matching ErrInvalidOption that names both", err)
	}
}
