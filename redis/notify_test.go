package redis_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
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

// silence swallows the replies on the proxy's connections and sends new
// ones straight to the server.
func (s *silentLink) silence() {
	s.p.Swallow()
	s.cut.Store(true)
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

// TestSilentPubSub: the pub/sub connection goes silent (no RST: its
// replies are swallowed) while a waiter waits on a lock held for 30 s. The
// hub's PING finds it out, the waiter is told to look and gets the lock
// soon after the release, well before its fallback (the holder's lease);
// and the next release reaches the next waiter through the connection that
// replaced the silent one.
func TestSilentPubSub(t *testing.T) {
	srv := testserver.Redis(t)
	link := newSilentLink(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	wb, err := dredis.New(goredis.NewClient(&goredis.Options{Addr: srv.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Client().Close() })
	dredis.SetPubSubClient(wb, link.Client)
	hb, err := dredis.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	holder, waiter := newDlock(t, hb), newDlock(t, wb)
	const name, lease = "silent-pubsub", 30 * time.Second
	channel := "dlock:{" + name + "}:wake"
	subscribed := func() bool {
		n, err := admin.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && n[channel] == 1
	}

	// wait locks name in the background and reports when it got it.
	wait := func() <-chan *dlock.Lease {
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiter.Mutex(name).Lock(ctxFor(t, 2*lease))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		return got
	}
	// released releases l and returns how long until a waiter got name.
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

	l, err := holder.Mutex(name, dlock.TTL(lease)).Lock(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := wait()
	pollUntil(t, 10*time.Second, "subscribed", subscribed)
	time.Sleep(300 * time.Millisecond) // the confirmation reaches the waiter, which attempts again
	link.silence()
	el, wl := released(l, got)
	t.Logf("silent link: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := lease / 3; el > limit {
		t.Errorf("through a silent pub/sub link the waiter got the lock %v after the release; want within %v (its fallback: %v)", el, limit, lease)
	}

	// The next release reaches the next waiter on the new connection.
	pollUntil(t, 10*time.Second, "a new pub/sub connection", func() bool { return link.direct.Load() > 0 })
	if err := wl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, err = holder.Mutex(name, dlock.TTL(lease)).Lock(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got = wait()
	pollUntil(t, 10*time.Second, "subscribed again", subscribed)
	time.Sleep(300 * time.Millisecond)
	el, wl = released(l, got)
	t.Logf("new link: the waiter got the lock %v after the release", el.Round(time.Millisecond))
	if limit := 2 * time.Second; el > limit {
		t.Errorf("on the new pub/sub connection the waiter got the lock %v after the release; want within %v", el, limit)
	}
	wl.Unlock(context.Background())
}
