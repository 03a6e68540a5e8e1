package redlock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/redlock"
	goredis "github.com/redis/go-redis/v9"
)

// silentLink is a go-redis client whose connections go through a proxy
// until cut, then straight to the server: the proxy's connections stay
// open and silent, as after a NAT entry or a route is lost.
type silentLink struct {
	p      *testserver.Proxy
	cut    atomic.Bool
	direct atomic.Int32 // connections made since the cut
	*goredis.Client
}

func newSilentLink(t *testing.T, target string) *silentLink {
	s := &silentLink{p: testserver.NewProxy(t, target)}
	s.Client = goredis.NewClient(&goredis.Options{Addr: target, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if s.cut.Load() {
			s.direct.Add(1)
		} else {
			addr = s.p.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { s.Client.Close() })
	return s
}

// pollUntil polls cond every 10ms until it holds, or fails the test after d.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSilentPubSub: the pub/sub connections to every master go silent (no
// RST: their replies are swallowed) while a waiter waits on a lock held
// for 30 s. The hubs' PINGs find it out and replace them, and the next
// release's notices reach the next waiter through the new connections.
// (A Redlock waiter looks again at least every second, so the first
// waiter is not left on a long fallback either way: what fails without
// the health check is that notices never come again.)
func TestSilentPubSub(t *testing.T) {
	g := testserver.RedisN(t, 3)
	var links []*silentLink
	var pubsub, direct []*goredis.Client
	for _, addr := range g.Addrs() {
		l := newSilentLink(t, addr)
		links, pubsub = append(links, l), append(pubsub, l.Client)
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		direct = append(direct, c)
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
	wait := func() <-chan *dlock.Lease {
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiter.Mutex(name).Lock(ctxT(t, 2*lease))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		return got
	}
	released := func(l *dlock.Lease, got <-chan *dlock.Lease) (time.Duration, *dlock.Lease) {
		start := time.Now()
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case wl := <-got:
			return time.Since(start), wl
		case <-time.After(lease + 5*time.Second):
			t.Fatal("the waiter did not get the lock")
			return 0, nil
		}
	}

	l, err := holder.Mutex(name, dlock.TTL(lease)).Lock(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := wait()
	pollUntil(t, 10*time.Second, "subscribed", subscribed)
	time.Sleep(300 * time.Millisecond)
	for _, l := range links {
		l.p.Swallow()
		l.cut.Store(true)
	}
	el, wl := released(l, got)
	t.Logf("silent links: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := lease / 3; el > limit {
		t.Errorf("through silent pub/sub links the waiter got the lock %v after the release; want within %v", el, limit)
	}

	for i, l := range links {
		pollUntil(t, 10*time.Second, "a new pub/sub connection to every master", func() bool { return l.direct.Load() > 0 })
		t.Logf("master %d: new pub/sub connection", i)
	}
	if err := wl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, err = holder.Mutex(name, dlock.TTL(lease)).Lock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got = wait()
	pollUntil(t, 10*time.Second, "subscribed again", subscribed)
	time.Sleep(300 * time.Millisecond)
	received, woken := redlock.Received(wb), redlock.Woken(wb)
	el, wl = released(l, got)
	t.Logf("new links: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	pollUntil(t, 5*time.Second, "notices of the release from a quorum of masters", func() bool { return redlock.Received(wb)-received >= 2 })
	if n := redlock.Woken(wb) - woken; n < 1 {
		t.Errorf("the release's notices woke no waiter")
	}
	wl.Unlock(context.Background())
}
