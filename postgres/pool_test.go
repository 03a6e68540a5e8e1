package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/sqllock"
	"github.com/dlock-dev/dlock/internal/sqllock/sqllocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestPoolSize: Open's pool keeps DefaultPoolMaxConns connections, or
// pool_max_conns of the URL, which is not sent to the server (it refused
// it as a setting before); one more may be open in lease mode: the LISTEN
// connection, which statements borrow while it waits.
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
	}, 1) // the LISTEN connection
	t.Run("keyword DSN", func(t *testing.T) {
		host, port, _ := strings.Cut(srv.Addr(), ":")
		kw := "host=" + host + " port=" + port + " user=postgres dbname=test sslmode=disable pool_max_conns=3"
		b, err := postgres.Open(ctx, kw)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if got := sqllock.PoolOf(postgres.Shell(b)).Stats().MaxOpenConnections; got != 3+1 {
			t.Errorf("MaxOpenConnections %d, want 3+1", got)
		}
		// The option wins over the DSN.
		b2, err := postgres.Open(ctx, kw, postgres.PoolMaxConns(4))
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if got := sqllock.PoolOf(postgres.Shell(b2)).Stats().MaxOpenConnections; got != 4+1 {
			t.Errorf("with PoolMaxConns(4): MaxOpenConnections %d, want 4+1", got)
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

// TestNewPoolKeepsConnections: a Backend on a caller's pgxpool.Pool keeps
// the connections its statements use between them, up to the pool's
// MaxConns, rather than taking one from the pool for nearly every
// statement (database/sql keeps only 2 by default), and gives them back
// to the pool once idle.
func TestNewPoolKeepsConnections(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	pool, _ := callerPools(t, srv.TestDSN(), 16)
	b, err := postgres.NewPool(pool, postgres.Table("keep_locks"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const goroutines, rounds = 8, 50
	lockAll := func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				m := c.Mutex("keep-" + strconv.Itoa(g))
				for range rounds {
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	lockAll() // the tables, the first connections
	before := pool.Stat().AcquireCount()
	lockAll()
	// 800 statements; a connection per statement was taken before.
	if n := pool.Stat().AcquireCount() - before; n > 4*goroutines {
		t.Errorf("%d connections taken from the pool for %d lock/unlock, want at most %d", n, goroutines*rounds, 4*goroutines)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pool.Stat().AcquiredConns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the pool's connections still kept by the idle Backend", pool.Stat().AcquiredConns())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
