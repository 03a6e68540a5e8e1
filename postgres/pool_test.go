package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestPoolSize: Open's pool keeps DefaultPoolMaxConns connections, or
// pool_max_conns of the URL, which is not sent to the server (it refused
// it as a setting before).
func TestPoolSize(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	sqllocktest.PoolSizes(t, func(params string) (*sqllock.Backend, error) {
		u, err := url.Parse(srv.TestDSN())
		if err != nil {
			return nil, err
		}
		if params != "" {
			u.RawQuery += "&" + params
		}
		dsn, opts, err := postgres.ParseURL(u)
		if err != nil {
			return nil, err
		}
		b, err := postgres.Open(ctx, dsn, opts...)
		if err != nil {
			return nil, err
		}
		return postgres.Shell(b), nil
	})
	t.Run("keyword DSN", func(t *testing.T) {
		host, port, _ := strings.Cut(srv.Addr(), ":")
		kw := "host=" + host + " port=" + port + " user=postgres dbname=test sslmode=disable pool_max_conns=3"
		b, err := postgres.Open(ctx, kw)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if got := sqllock.PoolOf(postgres.Shell(b)).Stats().MaxOpenConnections; got != 3 {
			t.Errorf("MaxOpenConnections %d, want 3", got)
		}
		// The option wins over the DSN.
		b2, err := postgres.Open(ctx, kw, postgres.PoolMaxConns(4))
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if got := sqllock.PoolOf(postgres.Shell(b2)).Stats().MaxOpenConnections; got != 4 {
			t.Errorf("with PoolMaxConns(4): MaxOpenConnections %d, want 4", got)
		}
		for _, bad := range []string{"pool_max_conns=0", "pool_max_conns=x"} {
			_, err := postgres.Open(ctx, strings.Replace(kw, "pool_max_conns=3", bad, 1))
			if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "pool_max_conns") {
				t.Errorf("%s: %v, want ErrInvalidOption naming pool_max_conns", bad, err)
			}
		}
	})
	if _, err := postgres.Open(ctx, srv.TestDSN(), postgres.PoolMaxConns(0)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("PoolMaxConns(0): %v, want ErrInvalidOption", err)
	}
}
