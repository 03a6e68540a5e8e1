package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/silenttest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// TestSilentPubSub: the pub/sub connections to every master go silent (no
// RST: their replies are swallowed) while a waiter waits on a lock held
// for 30 s. The hubs' PINGs find it out and replace them, and the next
// release's notices reach the next waiter through the new connections.
// (A Redlock waiter looks again at least every second, so the first
// waiter is not left on a long fallback either way: what fails without
// the health check is that notices never come again.)
func TestSilentPubSub(t *testing.T) {
	g := testserver.RedisN(t, 3)
	var detours []*testserver.Detour
	var pubsub, direct []*goredis.Client
	for _, addr := range g.Addrs() {
		d := testserver.NewDetour(t, addr)
		ps := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: d.Dial})
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { ps.Close(); c.Close() })
		detours, pubsub, direct = append(detours, d), append(pubsub, ps), append(direct, c)
	}
	wb, err := redlock.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	redlock.SetPubSubClients(wb, pubsub)
	holder := client(t, g)
	waiter, err := dlock.New(wb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })

	const name, lease = "silent-pubsub", 30 * time.Second
	channel := redlock.LockKey(wb, name) + ":wake"
	subscribed := func() bool {
		for _, s := range g.Nodes() {
			v, err := s.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
			if n, _ := v.([]any); err != nil || len(n) != 2 || n[1] != int64(1) {
				return false
			}
		}
		return true
	}

	l, err := holder.Mutex(name, dlock.TTL(lease)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := silenttest.Waiter(t, waiter, name, 2*lease)
	silenttest.PollUntil(t, 10*time.Second, "subscribed", subscribed)
	time.Sleep(300 * time.Millisecond)
	for _, d := range detours {
		d.Silence()
	}
	el, wl := silenttest.HandOver(t, l, got, lease+5*time.Second)
	t.Logf("silent links: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := lease / 3; el > limit {
		t.Errorf("through silent pub/sub links the waiter got the lock %v after the release; want within %v", el, limit)
	}

	for i, d := range detours {
		silenttest.PollUntil(t, 10*time.Second, "a new pub/sub connection to every master", func() bool { return d.Direct() > 0 })
		t.Logf("master %d: new pub/sub connection", i)
	}
	if err := wl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, err = holder.Mutex(name, dlock.TTL(lease)).Lock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got = silenttest.Waiter(t, waiter, name, 2*lease)
	silenttest.PollUntil(t, 10*time.Second, "subscribed again", subscribed)
	time.Sleep(300 * time.Millisecond)
	received, woken := redlock.Received(wb), redlock.Woken(wb)
	el, wl = silenttest.HandOver(t, l, got, lease+5*time.Second)
	t.Logf("new links: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	silenttest.PollUntil(t, 5*time.Second, "notices of the release from a quorum of masters", func() bool { return redlock.Received(wb)-received >= 2 })
	if n := redlock.Woken(wb) - woken; n < 1 {
		t.Errorf("the release's notices woke no waiter")
	}
	wl.Unlock(context.Background())
}
