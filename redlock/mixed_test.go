package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	_ "github.com/dlock-dev/dlock/redis" // the redis:// scheme
)

// TestRedisAndRedlockAlternate: one name used through redis:// and
// redlock:// in turn (a rolling switch from one to the other) gets strictly
// increasing tokens, with redlock on the redis server alone and on it and
// two more masters: both schemes keep the name's fence in the same key,
// with the same rule. Before, each had its own fence key and redis's
// counter tokens went back below redlock's. On one master the schemes
// exclude each other: redlock sees the redis backend's holds (which may
// have no x field, their lease ending with the hash) as held, not as
// foreign data.
func TestRedisAndRedlockAlternate(t *testing.T) {
	g := testserver.RedisN(t, 3)
	shared := g.Node(0).Addr()
	for _, tc := range []struct {
		name, redis, redlock string
		exclusive            bool // the schemes exclude each other
	}{
		{"one master", "redis://" + shared, "redlock://" + shared, true},
		{"one master, counter tokens", "redis://" + shared + "?clock_tokens=false", "redlock://" + shared, true},
		// redis:// on one of three masters does not exclude redlock (a
		// quorum of the others grants), but tokens still increase, as
		// long as the clocks agree (see redis.ClockTokens).
		{"three masters", "redis://" + shared, masterURL(g, ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var clients []*dlock.Client
			for _, u := range []string{tc.redis, tc.redlock} {
				c, err := dlock.Open(ctx, u)
				if err != nil {
					t.Fatalf("Open %s: %v", u, err)
				}
				defer c.Close()
				clients = append(clients, c)
			}
			name := "alternate/" + tc.name
			var last uint64
			var lastBy string
			for i := range 8 {
				// redis, redlock, then redlock, redis: each hands over to
				// the other and to itself.
				j := i % 2
				if i >= 4 {
					j = 1 - j
				}
				c, by := clients[j], []string{tc.redis, tc.redlock}[j]
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Fatalf("Lock %d by %s: %v", i, by, err)
				}
				if l.Token() <= last {
					t.Errorf("Lock %d by %s: token %d is not above %d, the last token (by %s)", i, by, l.Token(), last, lastBy)
				}
				last, lastBy = l.Token(), by
				if tc.exclusive && (i == 0 || i == 3) {
					// While it is held, the other scheme is not granted.
					if o, err := clients[1-j].Mutex(name).TryLock(ctx); err == nil {
						o.Unlock(ctx)
						t.Errorf("TryLock by the other scheme while %s holds the name: granted", by)
					} else if !errors.Is(err, dlock.ErrNotAcquired) {
						t.Errorf("TryLock by the other scheme while %s holds the name: %v, want ErrNotAcquired", by, err)
					}
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock %d by %s: %v", i, by, err)
				}
			}
			if !tc.exclusive {
				// redlock is granted by the two other masters while redis
				// holds the shared one; redlock's release leaves that hold
				// alone (it once took a hold without x for a free lock
				// and deleted it).
				side := name + "/side"
				r, err := clients[0].Mutex(side).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				o, err := clients[1].Mutex(side).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := o.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := r.Unlock(ctx); err != nil {
					t.Errorf("the redis hold on the shared master after redlock's release: %v", err)
				}
			}
		})
	}
}
