package redisconn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/testserver"
	goredis "github.com/redis/go-redis/v9"
)

// TestPubSub checks the adapter against a real server: a confirmation, a
// read that times out (ErrQuiet) on a connection that stays usable, the
// reply to PING, and a message.
func TestPubSub(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	p := PubSub(c)
	defer p.Close()
	ctx := context.Background()
	receive := func(timeout time.Duration, want notify.Event) {
		t.Helper()
		ev, err := p.Receive(ctx, timeout)
		if err != nil || ev != want {
			t.Fatalf("Receive = %+v, %v; want %+v", ev, err, want)
		}
	}
	if err := p.Subscribe(ctx, "ch"); err != nil {
		t.Fatal(err)
	}
	receive(5*time.Second, notify.Event{Kind: notify.Subscribed, Channel: "ch"})
	if _, err := p.Receive(ctx, 100*time.Millisecond); !errors.Is(err, notify.ErrQuiet) {
		t.Fatalf("Receive with nothing to receive: %v, want ErrQuiet", err)
	}
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	receive(5*time.Second, notify.Event{Kind: notify.Other})
	if err := c.Publish(ctx, "ch", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	receive(5*time.Second, notify.Event{Kind: notify.Message, Channel: "ch", Payload: "hello"})
	p.Close()
	if _, err := p.Receive(ctx, time.Second); err == nil || errors.Is(err, notify.ErrQuiet) {
		t.Fatalf("Receive after Close: %v, want an error other than ErrQuiet", err)
	}
}
