package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// TestRoundTrips counts, with MONITOR, the commands the server receives:
// one per uncontended acquisition (Lock, TryLock, fair, reentrant), one
// per release and one per Extend.
func TestRoundTrips(t *testing.T) {
	srv := testserver.Redis(t)
	c := newDlock(t, newBackend(t, srv.Addr()))
	ctx := ctxFor(t, time.Minute)
	warmUp(t, c)
	mon := startMonitor(t, srv.Addr())
	expect := func(what string, want ...string) {
		t.Helper()
		if got := mon.commands(); !slices.Equal(got, want) {
			t.Errorf("%s: the server got %q, want %q", what, got, want)
		}
	}

	l, err := c.Mutex("rt").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("uncontended Lock", "evalsha")
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	expect("Extend", "evalsha")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expect("Unlock", "evalsha")

	l, err = c.Mutex("rt").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("TryLock", "evalsha")
	l.Unlock(ctx)
	expect("Unlock after TryLock", "evalsha")

	fair := c.Mutex("rt-fair", dlock.Fair(), dlock.Owner("rt-owner"))
	outer, err := fair.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("uncontended fair Lock", "evalsha")
	inner, err := fair.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("reentrant Lock", "evalsha")
	inner.Unlock(ctx)
	outer.Unlock(ctx)
	expect("two Unlocks", "evalsha", "evalsha")
}

// TestWaitersShareOneSubscription checks that waiting does not poll, that
// all the waiters of a backend share one pub/sub connection with one
// subscription per lock, and that a release wakes one local waiter.
func TestWaitersShareOneSubscription(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	holder := newDlock(t, newBackend(t, srv.Addr()))
	waiters := newDlock(t, newBackend(t, srv.Addr()))
	warmUp(t, holder)
	const names, perName = 3, 4
	held := make([]*dlock.Lease, names)
	for i := range held {
		l, err := holder.Mutex(fmt.Sprint("shared-", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	type result struct {
		name int
		l    *dlock.Lease
		err  error
	}
	results := make(chan result, names*perName)
	var registered sync.WaitGroup
	for i := range names {
		for range perName {
			registered.Add(1)
			var once sync.Once
			m := waiters.Mutex(fmt.Sprint("shared-", i), dlock.OnWait(func(dlock.Holder) { once.Do(registered.Done) }))
			go func() {
				l, err := m.Lock(ctx)
				results <- result{i, l, err}
			}()
		}
	}
	registered.Wait()
	time.Sleep(200 * time.Millisecond) // the subscriptions are confirmed, the retries made

	admin := newClient(t, srv.Addr())
	pubsubConns, err := admin.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(pubsubConns), "\n") + 1; n != 1 {
		t.Errorf("%d pub/sub connections for %d waiters, want 1:\n%s", n, names*perName, pubsubConns)
	}
	var channels []string
	for i := range names {
		channels = append(channels, fmt.Sprintf("dlock:{shared-%d}:wake", i))
	}
	subs, err := admin.PubSubNumSub(ctx, channels...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range channels {
		if subs[ch] != 1 {
			t.Errorf("channel %s has %d subscribers, want 1", ch, subs[ch])
		}
	}

	mon := startMonitor(t, srv.Addr())
	time.Sleep(500 * time.Millisecond)
	if got := mon.commands(); len(got) != 0 {
		t.Errorf("waiters sent %q while the locks were held; want nothing (no polling)", got)
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil || r.name != 0 {
		t.Fatalf("after the release of shared-0: waiter of shared-%d got %v", r.name, r.err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := mon.commands(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
		t.Errorf("a release and the grant to one woken waiter: the server got %q, want the release and one attempt", got)
	}
	// Let everything finish: each grant is released, which wakes the next.
	r.l.Unlock(ctx)
	for _, l := range held[1:] {
		l.Unlock(ctx)
	}
	for range names*perName - 1 {
		r := <-results
		if r.err != nil {
			t.Fatalf("waiter of shared-%d: %v", r.name, r.err)
		}
		r.l.Unlock(ctx)
	}
}

func TestForeignData(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	rdb := newClient(t, srv.Addr())
	b := newBackend(t, srv.Addr())
	c := newDlock(t, b)

	check := func(what string, err error, key string) {
		t.Helper()
		if !errors.Is(err, dredis.ErrForeignData) {
			t.Fatalf("%s: %v, want ErrForeignData", what, err)
		}
		for _, s := range []string{key, b.String()} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not name %q", what, err, s)
			}
		}
	}

	// A string at the lock's key.
	rdb.Set(ctx, "dlock:{str}", "someone else's", 0)
	_, err := c.Mutex("str").TryLock(ctx)
	check("TryLock", err, `dlock:{str}`)
	if !strings.Contains(err.Error(), `"str"`) {
		t.Errorf("error %q does not name the lock", err)
	}
	start := time.Now()
	_, err = c.Mutex("str").Lock(ctxFor(t, 10*time.Second))
	check("Lock", err, `dlock:{str}`)
	if time.Since(start) > 5*time.Second {
		t.Errorf("Lock on foreign data took %v; it should fail at once", time.Since(start))
	}
	_, err = c.Mutex("str", dlock.Fair()).Lock(ctx)
	check("fair Lock", err, `dlock:{str}`)
	if v, _ := rdb.Get(ctx, "dlock:{str}").Result(); v != "someone else's" {
		t.Errorf("the foreign value became %q", v)
	}
	if ttl := rdb.PTTL(ctx, "dlock:{str}").Val(); ttl != -1 {
		t.Errorf("the foreign key got a TTL of %v", ttl)
	}

	// A hash that is not a lock.
	rdb.HSet(ctx, "dlock:{hash}", "field", "value")
	_, err = c.Mutex("hash").TryLock(ctx)
	check("TryLock on a foreign hash", err, `dlock:{hash}`)
	if v := rdb.HGetAll(ctx, "dlock:{hash}").Val(); len(v) != 1 || v["field"] != "value" {
		t.Errorf("the foreign hash became %v", v)
	}

	// The queue of a fair lock.
	holder, err := c.Mutex("queue", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "dlock:{queue}:queue", "not a list", 0)
	other := newDlock(t, newBackend(t, srv.Addr()))
	_, err = other.Mutex("queue", dlock.Fair()).Lock(ctx)
	check("fair Lock with a foreign queue", err, `dlock:{queue}:queue`)
	if v, _ := rdb.Get(ctx, "dlock:{queue}:queue").Result(); v != "not a list" {
		t.Errorf("the foreign queue value became %q", v)
	}
	if err := holder.Err(); err != nil {
		t.Errorf("the holder's lease: %v", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Errorf("the holder's Unlock: %v", err)
	}

	// Data replaced under a holder: the release reports it, changes nothing.
	l, err := c.Mutex("replaced").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{replaced}")
	rdb.Set(ctx, "dlock:{replaced}", "mine now", 0)
	check("Unlock", l.Unlock(ctx), `dlock:{replaced}`)
	if v, _ := rdb.Get(ctx, "dlock:{replaced}").Result(); v != "mine now" {
		t.Errorf("the replaced value became %q", v)
	}

	// The count of a hold corrupted under the holder: the release reports
	// foreign data (before, a raw Lua error about arithmetic on nil).
	l, err = c.Mutex("count").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, "dlock:{count}", "n", "many")
	check("Unlock with a foreign count", l.Unlock(ctx), `dlock:{count}`)
	if v := rdb.HGet(ctx, "dlock:{count}", "n").Val(); v != "many" {
		t.Errorf("the foreign count became %q", v)
	}
}

// TestServerKilled kills redis-server while leases are held and a Lock
// waits: the leases report the loss, nothing panics, the waiter waits on
// through the outage and is granted after the restart (which empties the
// server), new locks work with tokens above the old ones, and waiters are
// woken by releases again.
func TestServerKilled(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	a := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(600*time.Millisecond))
	b := newDlock(t, newBackend(t, srv.Addr()))
	l1, err := a.Mutex("k1").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Mutex("k2", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		l, err := b.Mutex("k1").Lock(ctx)
		if err == nil {
			l.Unlock(context.Background())
		}
		waiting <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lease{l1, l2} {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("lease %s not over 5s after the server was killed", l.Name())
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("lease %s: Err() = %v, want ErrLeaseLost", l.Name(), err)
		}
	}
	// A waiting Lock rides out the outage (its context has a minute)...
	select {
	case err := <-waiting:
		t.Fatalf("the waiting Lock returned while the server was down: %v", err)
	case <-time.After(time.Second):
	}
	if err := l1.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Unlock of a lost lease: %v, want ErrLeaseLost", err)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// ... and is granted once the server is back (empty, so k1 is free).
	select {
	case err := <-waiting:
		if err != nil {
			t.Errorf("waiting Lock after the restart: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the waiting Lock was not granted 20s after the server came back")
	}
	l3, err := a.Mutex("k1").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the restart: %v", err)
	}
	if l3.Token() <= l1.Token() {
		t.Errorf("token after the restart %d is not above %d, though the server lost the fence", l3.Token(), l1.Token())
	}
	// A waiter is woken by the release, long before the TTL would end it.
	hold, err := a.Mutex("k3", dlock.TTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Mutex("k3").Lock(ctx)
		if err == nil {
			l.Unlock(context.Background())
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	hold.Unlock(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter after the restart: %v", err)
		}
		if d := time.Since(released); d > 2*time.Second {
			t.Errorf("the waiter got the lock %v after the release", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the release after the restart")
	}
	l3.Unlock(ctx)
}

// TestUnreachable: no server at the address. Lock and TryLock fail at once
// naming the address, and dlock.Open fails the same way.
func TestUnreachable(t *testing.T) {
	addr := freeAddr(t)
	b, err := dredis.New(newClient(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	c := newDlock(t, b)
	for _, op := range []string{"Lock", "TryLock"} {
		ctx := ctxFor(t, 20*time.Second)
		start := time.Now()
		var err error
		if op == "Lock" {
			_, err = c.Mutex("nowhere").Lock(ctx)
		} else {
			_, err = c.Mutex("nowhere").TryLock(ctx)
		}
		if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), `"nowhere"`) {
			t.Errorf("%s: %v; want ErrBackendUnavailable naming %s and the lock", op, err, addr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s took %v", op, d)
		}
	}
	_, err = dlock.Open(ctxFor(t, 20*time.Second), "redis://:secret@"+addr+"/0")
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Open: %v; want ErrBackendUnavailable naming %s", err, addr)
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("Open's error shows the password: %v", err)
	}
}

// TestPausedServer: a server that accepts but does not answer (SIGSTOP).
// Lock honours its context's deadline, for a client that ignores context
// deadlines (go-redis's default) and for one made from a URL; an attempt
// that reaches the server after the caller gave up is given back.
func TestPausedServer(t *testing.T) {
	srv := testserver.Redis(t)
	plain := newDlock(t, newBackend(t, srv.Addr()))
	owned, err := dlock.Open(ctxFor(t, time.Minute), "redis://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owned.Close() })
	other := newDlock(t, newBackend(t, srv.Addr()))
	for _, c := range []*dlock.Client{plain, owned} {
		warm, err := c.Mutex("paused-warm").Lock(ctxFor(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		warm.Unlock(context.Background())
	}
	for i, c := range []*dlock.Client{plain, owned} {
		name := fmt.Sprint("paused-", i)
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := c.Mutex(name).Lock(ctxFor(t, 300*time.Millisecond))
		took := time.Since(start)
		time.Sleep(200 * time.Millisecond)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Lock on a paused server: %v, want ErrNotAcquired and DeadlineExceeded", c, err)
		}
		if took > 2*time.Second {
			t.Errorf("%s: Lock with a 300ms deadline took %v", c, took)
		}
		// Whatever the server did with the late attempt, the lock is free.
		deadline := time.Now().Add(10 * time.Second)
		for {
			l, err := other.Mutex(name).TryLock(ctxFor(t, time.Minute))
			if err == nil {
				l.Unlock(context.Background())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the lock stayed held after the caller gave up: %v", c, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestAuthentication(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	if err := newClient(t, srv.Addr()).ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"redis://" + srv.Addr(), "redis://:wrong-pw@" + srv.Addr()} {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "authentication") {
			t.Errorf("Open(%s): %v, want ErrBackendUnavailable saying authentication failed", url, err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong-pw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	c := newDlock(t, newBackend(t, srv.Addr()))
	_, err := c.Mutex("auth").TryLock(ctx)
	if !errors.Is(err, dlock.ErrBackendUnavailable) || !strings.Contains(err.Error(), "authentication") {
		t.Errorf("TryLock without a password: %v, want ErrBackendUnavailable saying authentication failed", err)
	}
	good, err := dlock.Open(ctx, "redis://:s3cret@"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if strings.Contains(good.String(), "s3cret") {
		t.Errorf("the backend description %q shows the password", good.String())
	}
	l, err := good.Mutex("auth").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
}

func TestServerTooOld(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	old := fakeServer(t, "5.0.7", false)
	c := newDlock(t, newBackend(t, old))
	_, err := c.Mutex("old").TryLock(ctx)
	if !errors.Is(err, dredis.ErrServerTooOld) || !strings.Contains(err.Error(), "5.0.7") || !strings.Contains(err.Error(), dredis.MinServerVersion) {
		t.Errorf("TryLock on Redis 5.0.7: %v, want ErrServerTooOld naming both versions", err)
	}
	if _, err := dlock.Open(ctx, "redis://"+old); !errors.Is(err, dredis.ErrServerTooOld) {
		t.Errorf("Open on Redis 5.0.7: %v, want ErrServerTooOld", err)
	}
	// A server that refuses INFO: the scripts' failure tells.
	silent := fakeServer(t, "", true)
	c = newDlock(t, newBackend(t, silent))
	if _, err := c.Mutex("old").Lock(ctx); !errors.Is(err, dredis.ErrServerTooOld) {
		t.Errorf("Lock on a server without EVALSHA: %v, want ErrServerTooOld", err)
	}
}

func TestURLs(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	for _, url := range []string{
		"redis://",
		"redis://:pw-in-url@127.0.0.1:notaport",
		"redis://127.0.0.1:1,127.0.0.1:2",
		"redis://127.0.0.1:1/notadb",
		"redis://127.0.0.1:1/0?no_such_option=1",
		"redis://127.0.0.1:1?key_prefix=a{b",
		"redis://127.0.0.1:1?waiter_timeout=soon",
		"redis://127.0.0.1:1?waiter_timeout=1ms",
		"redis://127.0.0.1:1?wait_replicas=x",
		"redis://127.0.0.1:1?wait_replicas=0",
		"redis://127.0.0.1:1?wait_replicas_timeout=1s",
		"redis://127.0.0.1:1?context_timeout_enabled=perhaps",
		"redis://127.0.0.1:1?clock_tokens=perhaps",
		"redis+sentinel://127.0.0.1:1",
		"redis+sentinel://127.0.0.1:1/master/x",
		"redis+sentinel://127.0.0.1:1/master/0/extra",
		"redis+cluster://127.0.0.1:1/0",
		"redis+cluster://127.0.0.1:1,,127.0.0.1:2",
		"redis+nonsense://127.0.0.1:1",
		"redis://%zz",
		"redis://127.0.0.1:1?key_prefix=a&key_prefix=b",
		"redis://127.0.0.1:1?dial_timeout=1s&dial_timeout=2s",
		"redis://127.0.0.1:1?dial_timeout=soon",
		"redis://127.0.0.1:1?sentinel_username=x",
		"redis://127.0.0.1:1?addr=127.0.0.1:2",
		"redis://127.0.0.1:1?connect_timeout=-1s",
		"redis://127.0.0.1:1?a=1;b=2",
		"redis+cluster://127.0.0.1:1?master_name=m",
	} {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", url, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw-in-url") {
			t.Errorf("Open(%q) shows the password: %v", url, err)
		}
	}

	srv := testserver.Redis(t)
	c, err := dlock.Open(ctx, "redis://"+srv.Addr()+"/2?key_prefix=app:locks&waiter_timeout=2s&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if want := "redis " + srv.Addr() + "/2"; c.String() != want {
		t.Errorf("String() = %q, want %q", c.String(), want)
	}
	l, err := c.Mutex("prefixed").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db2 := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: 2})
	defer db2.Close()
	if n := db2.Exists(ctx, "app:locks:{prefixed}").Val(); n != 1 {
		t.Errorf("no key app:locks:{prefixed} in database 2 while the lock is held")
	}
	l.Unlock(ctx)
}

// TestClose: Close leaves a caller's client open, and closes a client the
// backend made.
func TestClose(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	rdb := newClient(t, srv.Addr())
	b, err := dredis.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	c := newDlock(t, b)
	// Make the backend use its pub/sub connection, then close.
	l, err := c.Mutex("close").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	c.Mutex("close").Lock(waitCtx)
	cancel()
	l.Unlock(ctx)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
	if _, _, err := b.Acquire(ctx, dlock.Request{Name: "x", Owner: "o", TTL: time.Second}); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}

	ob, err := dredis.Open(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	own := ob.Client()
	ob.Close()
	if err := own.Ping(ctx).Err(); err == nil {
		t.Errorf("the client the backend made still works after Close")
	}
	if _, err := dredis.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := dredis.New(rdb, dredis.KeyPrefix("a*b")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with a bad prefix: %v, want ErrInvalidOption", err)
	}
	// The options that make a client are Open's.
	if _, err := dredis.New(rdb, dredis.DB(1)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with DB: %v, want ErrInvalidOption", err)
	}
	for _, bad := range [][]dredis.Option{{dredis.DB(-1)}, {dredis.Cluster(), dredis.Sentinel("m")}, {dredis.Cluster(), dredis.DB(1)}, {}} {
		addr := srv.Addr()
		if len(bad) == 0 {
			addr += "," + srv.Addr() // several addresses without Cluster or Sentinel
		}
		if _, err := dredis.Open(ctx, addr, bad...); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(%s) with %d options: %v, want ErrInvalidOption", addr, len(bad), err)
		}
	}
}
