package redis_test

import (
	"context"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
)

// BenchmarkClockTokens runs the standard workloads on one server with the
// default clock tokens (Clock) and with ClockTokens(false) (Counter), in
// the same run, for the cost of the safe default; the uncontended pair and
// the contended hand-off are the figures to compare:
//
//	go test -run XXX -bench 'ClockTokens/.*/(Uncontended|Contended)$' -count 3 ./redis
func BenchmarkClockTokens(b *testing.B) {
	srv := testserver.Redis(b)
	for _, tc := range []struct {
		name string
		opts []dredis.Option
	}{{"Clock", nil}, {"Counter", []dredis.Option{dredis.ClockTokens(false)}}} {
		b.Run(tc.name, func(b *testing.B) {
			dlocktest.BenchLockers(b, func(b *testing.B) dlocktest.Locker {
				c, err := dlock.New(newBackend(b, srv.Addr(), tc.opts...))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return locker{c}
			})
		})
	}
}

// locker is a dlocktest.Locker on a Client.
type locker struct{ c *dlock.Client }

func (l locker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}
