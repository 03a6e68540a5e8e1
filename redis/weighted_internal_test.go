package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	goredis "github.com/redis/go-redis/v9"
)

// TestWeightedStateSurvivesMutexScripts: the mutex's scripts, run on a
// weighted name's state (a mutex waiter's late cancel, a lost mutex hold's
// release and renewal), change nothing that counts: the holder stays, its
// weight stays held, and the state keeps its expiry.
func TestWeightedStateSurvivesMutexScripts(t *testing.T) {
	srv := testserver.Redis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := dlock.Request{Name: "m", Owner: "w", TTL: time.Minute, Kind: dlock.KindSemaphore, Limit: 2, Weight: 2}
	g, _, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	k := b.keys.get("m")
	for _, run := range []func() error{
		func() error {
			_, _, err := b.run(ctx, cancelScript, k.all[:], "0123456789abcdef1", "a-mutex-waiter")
			return err
		},
		func() error { return b.Release(ctx, dlock.Hold{Name: "m", Owner: "a-mutex", Token: 1}) },
		func() error { return b.Renew(ctx, dlock.Hold{Name: "m", Owner: "a-mutex", Token: 1}, time.Minute) },
		func() error {
			return b.RenewBatch(ctx, []dlock.Renewal{{Hold: dlock.Hold{Name: "m", Owner: "a-mutex", Token: 1}, TTL: time.Minute}})[0]
		},
	} {
		if err := run(); err != nil && !errors.Is(err, dlock.ErrLeaseLost) {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, k.lock()).Val(); n != 1 {
		t.Fatal("the mutex's scripts deleted the weighted state")
	}
	if p := rdb.PTTL(ctx, k.lock()).Val(); p < 30*time.Second || p > time.Minute {
		t.Errorf("the state's TTL is %v after the mutex's scripts, want its holder's (a minute)", p)
	}
	other := req
	other.Owner, other.Weight = "v", 1
	if _, _, err := b.Acquire(ctx, other); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a permit beside a holder of the whole limit: %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "m", Owner: "w", Token: g.Token, Handle: g.Handle, Kind: dlock.KindSemaphore}); err != nil {
		t.Fatalf("the weighted holder's release: %v", err)
	}
	if n := rdb.Exists(ctx, k.lock()).Val(); n != 0 {
		t.Errorf("the state is left after its last holder's release")
	}
}
