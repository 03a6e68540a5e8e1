package mysql_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mysql"
)

// TestParseURL: the backend's parameters are taken, the driver's and
// system variables pass on, and anything else is ErrInvalidOption.
func TestParseURL(t *testing.T) {
	u, _ := url.Parse("mysql://app:p%40ss@db/app?table=locks&mode=session&tls=false&innodb_lock_wait_timeout=5")
	dsn, opts, err := mysql.ParseURL(u)
	if err != nil || len(opts) != 2 {
		t.Fatalf("ParseURL: %q, %d options, %v", dsn, len(opts), err)
	}
	if !strings.HasPrefix(dsn, "app:p@ss@tcp(db:3306)/app?") || !strings.Contains(dsn, "innodb_lock_wait_timeout=5") || strings.Contains(dsn, "table") {
		t.Errorf("dsn %q", dsn)
	}
	for _, bad := range []string{
		"mysql://db/app?table=x;foo=1",
		"mysql://db/app?foo=1",
		"mysql://db/app?table=a&table=b",
		"mysql://db/app?waiter_timeout=soon",
		"mysql://db/app?mode=sessions",
		"mysql://db/app?connect_timeout=1s&timeout=1s",
		"mysql://db/",
		"postgres://db/app",
	} {
		u, _ := url.Parse(bad)
		if _, _, err := mysql.ParseURL(u); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("ParseURL(%s): %v, want ErrInvalidOption", bad, err)
		}
	}
}
