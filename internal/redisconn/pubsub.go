package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/dlock-dev/dlock/internal/notify"
	goredis "github.com/redis/go-redis/v9"
)

// Subscriber is a go-redis client that makes pub/sub connections: a
// *Client, *ClusterClient or UniversalClient.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

// PubSub returns a [notify.Conn] on a new pub/sub connection of c (made at
// its first use).
func PubSub(c Subscriber) notify.Conn { return pubSub{c.Subscribe(context.Background())} }

type pubSub struct{ ps *goredis.PubSub }

func (p pubSub) Subscribe(ctx context.Context, channels ...string) error {
	return p.ps.Subscribe(ctx, channels...)
}

func (p pubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.ps.Unsubscribe(ctx, channels...)
}

func (p pubSub) Ping(ctx context.Context) error { return p.ps.Ping(ctx) }

func (p pubSub) Close() error { return p.ps.Close() }

// Receive reads with a deadline: go-redis keeps the connection after a
// read that timed out (and reconnects after any other error).
func (p pubSub) Receive(ctx context.Context, timeout time.Duration) (notify.Event, error) {
	msg, err := p.ps.ReceiveTimeout(ctx, timeout)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return notify.Event{}, fmt.Errorf("%w: %w", notify.ErrQuiet, err)
		}
		return notify.Event{}, err
	}
	switch m := msg.(type) {
	case *goredis.Subscription:
		if m.Kind == "subscribe" {
			return notify.Event{Kind: notify.Subscribed, Channel: m.Channel}, nil
		}
	case *goredis.Message:
		return notify.Event{Kind: notify.Message, Channel: m.Channel, Payload: m.Payload}, nil
	}
	return notify.Event{Kind: notify.Other}, nil
}
