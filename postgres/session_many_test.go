package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
)

// TestSessionManyClients: 64 processes' worth of session-mode clients
// (each its own Backend, pool and connections) contend for one name on a
// server with PostgreSQL's default max_connections (100), fair and not.
// Every client gets the lock each time it asks, and no two hold it at
// once: the waiters of a name must not take more connections than the
// server allows.
func TestSessionManyClients(t *testing.T) {
	srv := testserver.Postgres(t)
	for _, fair := range []bool{false, true} {
		name := "many"
		var opts []dlock.Option
		if fair {
			name, opts = "many-fair", append(opts, dlock.Fair())
		}
		t.Run(name, func(t *testing.T) { manyClients(t, srv.TestDSN(), name, opts) })
	}
}

func manyClients(t *testing.T, dsn, name string, opts []dlock.Option) {
	const (
		clients = 64
		rounds  = 3
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		b, err := postgres.Open(ctx, dsn, postgres.Session())
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c, err := dlock.New(b, dlock.TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	start := time.Now()
	var (
		inside, grants atomic.Int64
		wg             sync.WaitGroup
	)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name, opts...)
			for r := range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("client %d round %d: %v", i, r, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("client %d: %d holders at once", i, n)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("client %d unlock: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants in %v", grants.Load(), time.Since(start))
	if n := grants.Load(); n != clients*rounds {
		t.Errorf("%d grants, want %d", n, clients*rounds)
	}
}
