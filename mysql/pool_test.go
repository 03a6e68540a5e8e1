package mysql_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/mysql"
)

// TestPoolSize: Open's pool keeps DefaultPoolMaxConns connections, or
// pool_max_conns of the URL.
func TestPoolSize(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	sqllocktest.PoolSizes(t, func(params string) (*sqllock.Backend, error) {
		u := url.URL{Scheme: "mysql", User: url.User("root"), Host: srv.Addr(), Path: "/test", RawQuery: params}
		dsn, opts, err := mysql.ParseURL(&u)
		if err != nil {
			return nil, err
		}
		b, err := mysql.Open(ctx, dsn, opts...)
		if err != nil {
			return nil, err
		}
		return mysql.Shell(b), nil
	}, 0)
	if _, err := mysql.Open(ctx, srv.DSN(), mysql.PoolMaxConns(0)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("PoolMaxConns(0): %v, want ErrInvalidOption", err)
	}
}
