package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
)

// holdersFeed reads a Client.Watch channel in a test.
type holdersFeed struct {
	t   testing.TB
	ctx context.Context
	hs  <-chan dlock.Holders
}

func watchName(t testing.TB, c *dlock.Client, name string) *holdersFeed {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	hs, err := c.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return &holdersFeed{t: t, ctx: ctx, hs: hs}
}

// until reads states until one satisfies ok and returns it; it fails the
// test if the watch ends or sends nothing that does within 30 s. Errors
// are passed to ok like any state.
func (f *holdersFeed) until(what string, ok func(dlock.Holders) bool) dlock.Holders {
	f.t.Helper()
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for {
		select {
		case h, open := <-f.hs:
			if !open {
				f.t.Fatalf("the watch ended waiting for %s", what)
			}
			if ok(h) {
				return h
			}
		case <-limit.C:
			f.t.Fatalf("the watch sent no %s within 30 s", what)
		}
	}
}

func owners(n int, owner string) func(dlock.Holders) bool {
	return func(h dlock.Holders) bool {
		return h.Err == nil && len(h.Holders) == n && (n == 0 || h.Holders[0].Owner == owner)
	}
}

// TestWatchResumesAfterRestart: a watch of a mutex follows it by pub/sub;
// the server restarts (empty, so the hold and the watcher's registration
// are gone), the watch reports the failure, then the state after the
// restart (no holder), subscribes and registers again, and the next grant
// is pushed to it: the lease is a minute long, so only a notice shows it
// before the watch's 30 s limit.
func TestWatchResumesAfterRestart(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	const name = "watch-restart"
	channel, watchers := dredis.LockKey("dlock", name)+":watch", dredis.LockKey("dlock", name)+":watchers"
	w := newDlock(t, newBackend(t, srv.Addr()))
	f := watchName(t, w, name)
	f.until("no holder", owners(0, ""))

	c := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(time.Minute))
	l, err := c.Mutex(name, dlock.Owner("first")).Lock(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.until("the first holder", owners(1, "first"))

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	f.until("an error for the lost connection", func(h dlock.Holders) bool { return h.Err != nil })
	f.until("no holder after the restart", owners(0, ""))
	if n, err := admin.PubSubNumSub(context.Background(), channel).Result(); err != nil || n[channel] != 1 {
		t.Errorf("after the restart the watch channel has %v subscribers (%v), want 1", n[channel], err)
	}
	if n, err := admin.Exists(context.Background(), watchers).Result(); err != nil || n != 1 {
		t.Errorf("after the restart the watchers key exists %d (%v), want 1: the watcher registers again", n, err)
	}
	if err := l.Unlock(context.Background()); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of the hold the restart lost: %v, want ErrLeaseLost", err)
	}

	l2, err := c.Mutex(name, dlock.Owner("second")).Lock(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.until("the holder after the restart", owners(1, "second"))
	if err := l2.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.until("no holder after the release", owners(0, ""))
}

// TestWatchFastHold: a hold granted on the mutex's common path (its lease
// ends with its hash, so its release would take releaseFast, which does
// not publish) before anyone watched; a watch registers, and the hold's
// release is pushed to it. The lease is a minute long, so only a notice
// shows the release before the watch's 30 s limit.
func TestWatchFastHold(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	c := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(time.Minute))
	const name = "watch-fast"
	l, err := c.Mutex(name, dlock.Owner("fast")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := admin.HExists(ctx, dredis.LockKey("dlock", name), "x").Result(); err != nil || x {
		t.Fatalf("the uncontended grant wrote x (%v, %v): not the common path this test is about", x, err)
	}
	f := watchName(t, newDlock(t, newBackend(t, srv.Addr())), name)
	f.until("the holder", owners(1, "fast"))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	f.until("no holder after the release", owners(0, ""))
}

// TestWatchCost: while a name is watched its uncontended Lock and Unlock
// publish; once the watch ends its registration goes, and they publish
// nothing again.
func TestWatchCost(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	c := newDlock(t, newBackend(t, srv.Addr()))
	const name = "watch-cost"
	watchers := dredis.LockKey("dlock", name) + ":watchers"
	lockUnlock := func() int64 {
		t.Helper()
		before := publishes(t, admin)
		for range 3 {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return publishes(t, admin) - before
	}
	wctx, stop := context.WithCancel(ctx)
	hs, err := newDlock(t, newBackend(t, srv.Addr())).Watch(wctx, name)
	if err != nil {
		t.Fatal(err)
	}
	<-hs
	if n := lockUnlock(); n != 6 {
		t.Errorf("3 Lock/Unlock pairs of a watched name published %d times, want 6", n)
	}
	stop()
	for range hs {
	}
	deadline := time.Now().Add(10 * time.Second)
	for admin.Exists(ctx, watchers).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the watchers key %s is still there 10 s after the watch ended", watchers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := lockUnlock(); n != 0 {
		t.Errorf("3 Lock/Unlock pairs of a name no longer watched published %d times, want 0", n)
	}
}

// TestElectionState: an election's hold shows its kind and value in
// Inspect and keeps its term on Proclaim; a mutex asked of the name is
// refused naming the election; a Proclaim of a hold that was lost (its
// keys deleted) is ErrLeaseLost and writes nothing.
func TestElectionState(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	c := newDlock(t, newBackend(t, srv.Addr()))
	const name = "election-state"
	e := c.Election(name)
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Kind != dlock.KindElection || infos[0].Value != "v2" || infos[0].Token != l.Token() || infos[0].Owner != l.Owner() {
		t.Fatalf("Inspect: %+v, want the leader %s with value v2, term %d, kind election", infos, l.Owner(), l.Token())
	}
	_, err = c.Mutex(name).TryLock(ctx)
	var ce *dlock.ConflictError
	if !errors.As(err, &ce) || ce.Kind != dlock.KindElection || ce.AskedKind != dlock.KindMutex {
		t.Errorf("a mutex of an election's name: %v, want a ConflictError naming the election", err)
	}
	key := dredis.LockKey("dlock", name)
	if err := admin.Del(ctx, key, key+":holders", key+":expiry").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "v3"); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Proclaim of a lost hold: %v, want ErrLeaseLost", err)
	}
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("Proclaim of a lost hold left the lock's hash behind")
	}
}
