package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// TestSilentPubSub: the pub/sub connection goes silent (no RST: its
// replies are swallowed) while a waiter waits on a lock held for 30 s. The
// hub's PING finds it out, the waiter is told to look and gets the lock
// soon after the release, well before its fallback (the holder's lease);
// and the next release reaches the next waiter through the connection that
// replaced the silent one.
func TestSilentPubSub(t *testing.T) {
	srv := testserver.Redis(t)
	detour := testserver.NewDetour(t, srv.Addr())
	pubsub := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Dialer: detour.Dial})
	direct := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { pubsub.Close(); direct.Close() })
	wb, err := dredis.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	dredis.SetPubSubClient(wb, pubsub)
	hb, err := dredis.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	holder, waiter := newDlock(t, hb), newDlock(t, wb)
	const name, lease = "silent-pubsub", 30 * time.Second
	channel := "dlock:{" + name + "}:wake"
	subscribed := func() bool {
		n, err := direct.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && n[channel] == 1
	}

	l, err := holder.Mutex(name, dlock.TTL(lease)).Lock(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := silenttest.Waiter(t, waiter, name, 2*lease)
	silenttest.PollUntil(t, 10*time.Second, "subscribed", subscribed)
	time.Sleep(300 * time.Millisecond) // the confirmation reaches the waiter, which attempts again
	detour.Silence()
	el, wl := silenttest.HandOver(t, l, got, lease+5*time.Second)
	t.Logf("silent link: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := lease / 3; el > limit {
		t.Errorf("through a silent pub/sub link the waiter got the lock %v after the release; want within %v (its fallback: %v)", el, limit, lease)
	}

	// The next release reaches the next waiter on the new connection.
	silenttest.PollUntil(t, 10*time.Second, "a new pub/sub connection", func() bool { return detour.Direct() > 0 })
	if err := wl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, err = holder.Mutex(name, dlock.TTL(lease)).Lock(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got = silenttest.Waiter(t, waiter, name, 2*lease)
	silenttest.PollUntil(t, 10*time.Second, "subscribed again", subscribed)
	time.Sleep(300 * time.Millisecond)
	el, wl = silenttest.HandOver(t, l, got, lease+5*time.Second)
	t.Logf("new link: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := 2 * time.Second; el > limit {
		t.Errorf("on the new pub/sub connection the waiter got the lock %v after the release; want within %v", el, limit)
	}
	wl.Unlock(context.Background())
}
