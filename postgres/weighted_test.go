package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWeightedNotifyWakes: a semaphore's waiter on another Backend does
// not poll while the permits are held for long (its heartbeat is 10 s
// away), a release that leaves too little room does not let it in, and
// the release that makes room wakes it by NOTIFY at once.
func TestWeightedNotifyWakes(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	holder, err := postgres.Open(ctx, srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	cfg, err := pgxpool.ParseConfig(srv.TestDSN())
	if err != nil {
		t.Fatal(err)
	}
	cnt := new(counter)
	cfg.ConnConfig.Tracer = cnt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wb, err := postgres.NewPool(pool, postgres.WaiterTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := dlock.New(holder)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := dlock.New(wb)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	defer wc.Close()
	var held []*dlock.Lease
	for range 2 {
		l, err := hc.Semaphore("wnotify", 2, dlock.TTL(time.Minute)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := wc.Semaphore("wnotify", 2, dlock.Weight(2), dlock.TTL(time.Minute)).Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // the waiter settles
	before := cnt.n.Load()
	time.Sleep(time.Second)
	if n := cnt.n.Load() - before; n > 2 {
		t.Errorf("the waiter sent %d statements in a second while the permits were held for a minute", n)
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		l.Unlock(ctx)
		t.Fatal("a waiter of weight 2 was granted beside a permit of weight 1 of a semaphore of 2")
	case <-time.After(200 * time.Millisecond):
	}
	released := time.Now()
	if err := held[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		t.Logf("hand-off to another Backend after %v", time.Since(released))
		if l.Token() <= held[1].Token() {
			t.Errorf("token %d after %d", l.Token(), held[1].Token())
		}
		l.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// TestWeightedSessionRefused: session mode refuses semaphores of more
// than 1 at once, saying why, and writes nothing.
func TestWeightedSessionRefused(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	b, err := postgres.Open(ctx, srv.TestDSN(), postgres.Session())
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Semaphore("sess", 2).Acquire(ctx)
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "session mode grants semaphores of 1 only") {
		t.Errorf("a semaphore of 2 in session mode: %v, want ErrInvalidOption saying session mode grants semaphores of 1 only", err)
	}
	infos, err := b.Inspect(ctx, "sess")
	if err != nil || len(infos) != 0 {
		t.Errorf("after the refusal: %v, %v", infos, err)
	}
}
