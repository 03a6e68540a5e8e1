package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// TestRingRefused: New refuses a go-redis Ring with ErrInvalidOption
// naming it, and leaves the Ring to its owner. Before, a Ring was taken
// and the first Lock that had to wait panicked in Ring.Subscribe.
func TestRingRefused(t *testing.T) {
	srv := testserver.Redis(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	defer ring.Close()
	be, err := dredis.New(ring)
	if err == nil {
		be.Close()
		t.Fatal("New(Ring): no error")
	}
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(Ring): %v, want ErrInvalidOption naming the Ring", err)
	}
	if err := ring.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the Ring after New: %v", err)
	}
}
