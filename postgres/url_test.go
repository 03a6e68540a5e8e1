package postgres_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/postgres"
)

// TestParseURL: the backend's parameters are taken, libpq's pass on to
// pgx, and anything else is ErrInvalidOption.
func TestParseURL(t *testing.T) {
	u, _ := url.Parse("postgres://app:pw@db:5432/app?sslmode=disable&table=locks&mode=session&migrate=false&connect_timeout=3&application_name=x")
	dsn, opts, err := postgres.ParseURL(u)
	if err != nil || len(opts) != 4 {
		t.Fatalf("ParseURL: %q, %d options, %v", dsn, len(opts), err)
	}
	if !strings.Contains(dsn, "sslmode=disable") || !strings.Contains(dsn, "application_name=x") || strings.Contains(dsn, "table") {
		t.Errorf("dsn %q: want the driver's parameters only", dsn)
	}
	for _, bad := range []string{
		"postgres://db/app?table=x;foo=1",
		"postgres://db/app?foo=1",
		"postgres://db/app?table=a&table=b",
		"postgres://db/app?waiter_timeout=soon",
		"postgres://db/app?mode=sessions",
		"postgres://db/app?migrate=maybe",
		"postgres://db/app?connect_timeout=-1",
		"mysql://db/app",
	} {
		u, _ := url.Parse(bad)
		if _, _, err := postgres.ParseURL(u); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("ParseURL(%s): %v, want ErrInvalidOption", bad, err)
		}
	}
}
