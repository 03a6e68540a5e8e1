package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// scriptCommands returns the commands the server ran since the last CONFIG
// RESETSTAT (scripts' commands included), by name, with their call counts;
// the admin client's own INFO and CONFIG are left out.
func scriptCommands(t testing.TB, admin *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[name] = n
	}
	return out
}

// scriptEnv starts a server and returns an admin client, a context for
// the test and a backend on the server.
func scriptEnv(t *testing.T) (*goredis.Client, context.Context, *dredis.Backend) {
	t.Helper()
	srv := testserver.Redis(t)
	return newClient(t, srv.Addr()), ctxFor(t, time.Minute), newBackend(t, srv.Addr())
}

func resetStats(t testing.TB, admin *goredis.Client) {
	t.Helper()
	if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestUncontendedScriptCommands counts, with INFO commandstats, what the
// scripts run for an uncontended Lock and Unlock (default and fair): to
// acquire, one EXISTS (the hash is absent: its release deleted it), TIME
// and GETSET of the fence key (clock tokens, the default) or INCR of it
// (ClockTokens(false)), HSET and PEXPIRE; to release, one HMGET and DEL;
// nothing else (no queue look-up, no PUBLISH).
func TestUncontendedScriptCommands(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	const n = 10
	for _, tc := range []struct {
		name  string
		opts  []dredis.Option
		token map[string]int64 // the commands that make the token
	}{
		{"default", nil, map[string]int64{"time": n, "getset": n}},
		{"ClockTokens(false)", []dredis.Option{dredis.ClockTokens(false)}, map[string]int64{"incr": n}},
	} {
		c := newDlock(t, newBackend(t, srv.Addr(), tc.opts...))
		warmUp(t, c)
		for _, opts := range [][]dlock.Option{nil, {dlock.Fair()}} {
			name := fmt.Sprintf("cmds-%s-%d", tc.name, len(opts))
			// The name's first grant makes its slot's fence key.
			l, err := c.Mutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			resetStats(t, admin)
			for range n {
				l, err := c.Mutex(name, opts...).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got := scriptCommands(t, admin)
			want := map[string]int64{"evalsha": 2 * n, "exists": n, "hset": n, "pexpire": n, "hmget": n, "del": n}
			maps.Copy(want, tc.token)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %d uncontended Lock/Unlock pairs (options %d) ran %v, want %v", tc.name, n, len(opts), got, want)
			}
		}
	}
}

// TestGrantTokens checks the tokens of the scripts' common path (a free
// lock without a queue) with ClockTokens(false): the first token of a store without a fence key is
// the server's time in µs; a new grant's token is the fence plus one, also
// when the last lease expired without a release; a hash whose token is
// ahead of the fence gives f+1; and tokens are stored and returned
// exactly.
func TestGrantTokens(t *testing.T) {
	srv := testserver.Redis(t)
	admin, ctx := newClient(t, srv.Addr()), ctxFor(t, time.Minute)
	b := newBackend(t, srv.Addr(), dredis.ClockTokens(false))
	serverMicros := func() uint64 {
		t.Helper()
		tm, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(tm.UnixMicro())
	}
	acquire := func(owner string, ttl time.Duration) dlock.Grant {
		t.Helper()
		g, _, err := b.Acquire(ctx, dlock.Request{Name: "tok", Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatalf("Acquire by %s: %v", owner, err)
		}
		if g.Count != 1 {
			t.Fatalf("Acquire by %s: count %d, want 1", owner, g.Count)
		}
		return g
	}

	before := serverMicros()
	g1 := acquire("a", 50*time.Millisecond)
	if after := serverMicros(); g1.Token < before || g1.Token > after {
		t.Errorf("first token %d is not the server's time in µs (between %d and %d)", g1.Token, before, after)
	}
	time.Sleep(100 * time.Millisecond) // the lease expires, nobody releases it
	g2 := acquire("b", time.Minute)
	if g2.Token != g1.Token+1 {
		t.Errorf("token after expiry %d, want the fence plus one, %d", g2.Token, g1.Token+1)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "tok", Owner: "a", Token: g1.Token, Handle: g1.Handle}); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("release of the expired hold: %v, want ErrLeaseLost", err)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "tok", Owner: "b", Token: g2.Token, Handle: g2.Handle}); err != nil {
		t.Fatal(err)
	}

	// A fence ahead of the clock (a server whose clock went back): the
	// next token is f+1, exactly, also as stored.
	const ahead = 5000000000000000 // µs, in the year 2128
	if err := admin.HSet(ctx, "dlock:{tok}", "f", strconv.FormatUint(ahead, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	g3 := acquire("c", time.Minute)
	if g3.Token != ahead+1 {
		t.Errorf("token after fence %d: %d, want %d", uint64(ahead), g3.Token, uint64(ahead+1))
	}
	if f := admin.HGet(ctx, "dlock:{tok}", "f").Val(); f != strconv.FormatUint(ahead+1, 10) {
		t.Errorf("stored fence %q, want %d", f, uint64(ahead+1))
	}
	if err := b.Release(ctx, dlock.Hold{Name: "tok", Owner: "c", Token: g3.Token, Handle: g3.Handle}); err != nil {
		t.Fatal(err)
	}
	if g := acquire("d", time.Minute); g.Token != ahead+2 {
		t.Errorf("next token %d, want %d", g.Token, uint64(ahead+2))
	}
}

// TestReentryAfterFastGrant: a hold made by the scripts' common path is
// re-entered by its owner (same token, count 2), kept from others until
// both holds are released, and then free.
func TestReentryAfterFastGrant(t *testing.T) {
	_, ctx, b := scriptEnv(t)
	req := dlock.Request{Name: "re", Owner: "me", TTL: time.Minute}
	g1, _, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g2, _, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token != g1.Token || g2.Count != 2 {
		t.Fatalf("re-entry: token %d count %d, want token %d count 2", g2.Token, g2.Count, g1.Token)
	}
	hold := dlock.Hold{Name: "re", Owner: "me", Token: g1.Token, Handle: g1.Handle}
	other := dlock.Request{Name: "re", Owner: "other", TTL: time.Minute}
	if err := b.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	var held *dlock.HeldError
	if _, _, err := b.Acquire(ctx, other); !errors.As(err, &held) || held.Holder.Owner != "me" || held.Holder.Token != g1.Token {
		t.Fatalf("Acquire by another owner with one hold left: %v, want held by me with token %d", err, g1.Token)
	}
	if err := b.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	g3, _, err := b.Acquire(ctx, other)
	if err != nil {
		t.Fatalf("Acquire after both releases: %v", err)
	}
	if g3.Token <= g1.Token {
		t.Errorf("token %d after %d", g3.Token, g1.Token)
	}
}

// TestFreeLockWithQueue: a free lock whose hash records a fair queue is
// not granted to a request that is not the queue's head, fair or not.
func TestFreeLockWithQueue(t *testing.T) {
	admin, ctx, b := scriptEnv(t)
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "q", Owner: "first", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "q", Owner: "first", Token: g.Token, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
	// A waiter of another process heads the queue.
	deadline := time.Now().Add(time.Hour).UnixMilli()
	p := admin.TxPipeline()
	p.RPush(ctx, "dlock:{q}:queue", "elsewhere-1")
	p.ZAdd(ctx, "dlock:{q}:timeouts", goredis.Z{Score: float64(deadline), Member: "elsewhere-1"})
	p.HSet(ctx, "dlock:{q}", "w", 1, "f", g.Token) // a free lock's hash keeps its token while queued for
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for _, fair := range []bool{false, true} {
		_, _, err := b.Acquire(ctx, dlock.Request{Name: "q", Owner: "late", TTL: time.Minute, Fair: fair})
		if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "queued first") {
			t.Errorf("Acquire (fair %v) of a free lock with a queue: %v, want ErrNotAcquired, queued first", fair, err)
		}
	}
	if o := admin.HGet(ctx, "dlock:{q}", "o").Val(); o != "" {
		t.Errorf("the lock went to %q", o)
	}
}

// TestReleaseTellsHintedWaiter: a release publishes when the hash says a
// waiter may be waiting (s in the future), and not once that time passed.
func TestReleaseTellsHintedWaiter(t *testing.T) {
	admin, ctx, b := scriptEnv(t)
	for _, tc := range []struct {
		until time.Duration
		want  int64
	}{{time.Hour, 1}, {-time.Second, 0}} {
		g, _, err := b.Acquire(ctx, dlock.Request{Name: "hint", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		now, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		admin.HSet(ctx, "dlock:{hint}", "s", now.Add(tc.until).UnixMilli())
		before := publishes(t, admin)
		if err := b.Release(ctx, dlock.Hold{Name: "hint", Owner: "o", Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
		if n := publishes(t, admin) - before; n != tc.want {
			t.Errorf("release with a waiter hint %v from now published %d times, want %d", tc.until, n, tc.want)
		}
		if o := admin.HGet(ctx, "dlock:{hint}", "o").Val(); o != "" {
			t.Errorf("after the release the hash names holder %q", o)
		}
	}
}

// TestNonNumericFence: a hash whose f is not a number is not dlock's; the
// scripts refuse it and change nothing.
func TestNonNumericFence(t *testing.T) {
	admin, ctx, b := scriptEnv(t)
	admin.HSet(ctx, "dlock:{nan}", "f", "abc")
	_, _, err := b.Acquire(ctx, dlock.Request{Name: "nan", Owner: "o", TTL: time.Minute})
	if !errors.Is(err, dredis.ErrForeignData) {
		t.Fatalf("Acquire: %v, want ErrForeignData", err)
	}
	if v := admin.HGetAll(ctx, "dlock:{nan}").Val(); len(v) != 1 || v["f"] != "abc" {
		t.Errorf("the hash became %v", v)
	}
}

// TestFastHoldLeaseEndsWithHash: a hold made by the common path keeps no
// lease end x (the hash's expiry is the lease end), a renewal moves that
// expiry, and a waiting attempt by another owner first writes x (the lease
// end, unchanged) so that the hash may outlive the lease for the waiter,
// after which the lease still ends on time and a release still frees it.
func TestFastHoldLeaseEndsWithHash(t *testing.T) {
	admin, ctx, b := scriptEnv(t)
	key := dredis.LockKey("dlock", "x")
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "x", Owner: "me", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if v := admin.HGetAll(ctx, key).Val(); v["x"] != "" || v["o"] != "me" {
		t.Fatalf("fast hold %v, want owner me and no x", v)
	}
	hold := dlock.Hold{Name: "x", Owner: "me", Token: g.Token, Handle: g.Handle}
	if err := b.Renew(ctx, hold, time.Minute); err != nil {
		t.Fatal(err)
	}
	if p := admin.PTTL(ctx, key).Val(); p < 50*time.Second {
		t.Fatalf("PTTL after a renewal to 1m: %v", p)
	}
	if v := admin.HGet(ctx, key, "x").Val(); v != "" {
		t.Fatalf("a renewal of a fast hold wrote x %q", v)
	}
	_, w, err := b.Acquire(ctx, dlock.Request{Name: "x", Owner: "other", TTL: time.Minute, Wait: true})
	var held *dlock.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != "me" {
		t.Fatalf("waiting attempt: %v, want held by me", err)
	}
	w.Cancel(ctx)
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	x, err := admin.HGet(ctx, key, "x").Int64()
	if left := time.Duration(x-now.UnixMilli()) * time.Millisecond; err != nil || left < 50*time.Second || left > time.Minute {
		t.Fatalf("x after a waiting attempt: %d (%v left, %v), want the lease end, about 1m away", x, left, err)
	}
	if p := admin.PTTL(ctx, key).Val(); p < time.Minute {
		t.Errorf("PTTL %v: the hash does not outlive the lease for the waiter", p)
	}
	if err := b.Renew(ctx, hold, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	g2, _, err := b.Acquire(ctx, dlock.Request{Name: "x", Owner: "other", TTL: time.Minute})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("Acquire after the release: token %d, %v; want above %d", g2.Token, err, g.Token)
	}
}

// TestFenceNotATokenUnchanged: a fence key whose value is an integer but
// not a token (negative) makes an acquisition fail with ErrForeignData and
// is left as it was, though the common path's INCR took it first.
func TestFenceNotATokenUnchanged(t *testing.T) {
	admin, ctx, b := scriptEnv(t)
	if err := admin.Set(ctx, dredis.FenceKey("dlock", "neg"), "-3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := b.Acquire(ctx, dlock.Request{Name: "neg", Owner: "me", TTL: time.Minute})
	if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), dredis.FenceKey("dlock", "neg")) {
		t.Errorf("Acquire with fence -3: %v, want ErrForeignData naming the fence key", err)
	}
	if v := admin.Get(ctx, dredis.FenceKey("dlock", "neg")).Val(); v != "-3" {
		t.Errorf("fence %q after the failed acquisition, want -3", v)
	}
	if n := admin.Exists(ctx, dredis.LockKey("dlock", "neg")).Val(); n != 0 {
		t.Errorf("the failed acquisition left a lock hash")
	}
}

// TestClockTokens: with ClockTokens every grant's token is at least the
// server's time in µs, also when the fence key is behind (a replica that
// missed the last grants took over), and the common path then runs TIME
// and GETSET instead of INCR; a fence that does not hold a token is put
// back as it was.
func TestClockTokens(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	b := newBackend(t, srv.Addr(), dredis.ClockTokens(true))
	if !dredis.ClockTokensOf(b) {
		t.Fatal("ClockTokens(true) is not in effect")
	}
	warmUpBackend(t, b)
	var last uint64
	for i := range 3 {
		if err := admin.Set(ctx, dredis.FenceKey("dlock", "clock"), 7, 0).Err(); err != nil { // far behind
			t.Fatal(err)
		}
		resetStats(t, admin)
		g, _, err := b.Acquire(ctx, dlock.Request{Name: "clock", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got := scriptCommands(t, admin)
		want := map[string]int64{"evalsha": 1, "exists": 1, "time": 1, "getset": 1, "hset": 1, "pexpire": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("grant %d ran %v, want %v", i, got, want)
		}
		now, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last || g.Token > uint64(now.UnixMicro()) || g.Token < uint64(now.Add(-10*time.Second).UnixMicro()) {
			t.Fatalf("grant %d after a fence of 7: token %d, want above %d and the server's time in µs (%d)", i, g.Token, last, now.UnixMicro())
		}
		if f := admin.Get(ctx, dredis.FenceKey("dlock", "clock")).Val(); f != strconv.FormatUint(g.Token, 10) {
			t.Errorf("fence %q after grant %d, want %d", f, i, g.Token)
		}
		last = g.Token
		if err := b.Release(ctx, dlock.Hold{Name: "clock", Owner: "o", Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Set(ctx, dredis.FenceKey("dlock", "clock"), "abc", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Acquire(ctx, dlock.Request{Name: "clock", Owner: "o", TTL: time.Minute}); !errors.Is(err, dlock.ErrForeignData) {
		t.Errorf("Acquire with fence abc: %v, want ErrForeignData", err)
	}
	if f := admin.Get(ctx, dredis.FenceKey("dlock", "clock")).Val(); f != "abc" {
		t.Errorf("fence %q after the failed acquisition, want abc", f)
	}
}

// TestClockTokensDefault: clock tokens are on by default on every topology
// (a single server too: its address may move to a replica);
// ClockTokens(false), and clock_tokens=false in a URL, opt out.
func TestClockTokensDefault(t *testing.T) {
	single := func() goredis.UniversalClient { return goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) }
	sentinel := func() goredis.UniversalClient {
		return goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	}
	cluster := func() goredis.UniversalClient {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	}
	for _, tc := range []struct {
		name   string
		client func() goredis.UniversalClient
		opts   []dredis.Option
		want   bool
	}{
		{"single", single, nil, true},
		{"single+WaitReplicas", single, []dredis.Option{dredis.WaitReplicas(1, time.Second)}, true},
		{"single+ClockTokens(false)", single, []dredis.Option{dredis.ClockTokens(false)}, false},
		{"sentinel", sentinel, nil, true},
		{"sentinel+ClockTokens(false)", sentinel, []dredis.Option{dredis.ClockTokens(false)}, false},
		{"cluster", cluster, nil, true},
		{"cluster+ClockTokens(false)", cluster, []dredis.Option{dredis.ClockTokens(false)}, false},
	} {
		rdb := tc.client()
		b, err := dredis.New(rdb, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := dredis.ClockTokensOf(b); got != tc.want {
			t.Errorf("%s: clock tokens %v, want %v", tc.name, got, tc.want)
		}
		b.Close()
		rdb.Close()
	}
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"redis://127.0.0.1:1", true},
		{"redis://127.0.0.1:1?clock_tokens=true", true},
		{"redis://127.0.0.1:1?clock_tokens=false", false},
		{"redis://127.0.0.1:1?wait_replicas=1&clock_tokens=false", false},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		_, opts, err := dredis.ParseURL(u)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		rdb := single()
		b, err := dredis.New(rdb, opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := dredis.ClockTokensOf(b); got != tc.want {
			t.Errorf("%s: clock tokens %v, want %v", tc.url, got, tc.want)
		}
		b.Close()
		rdb.Close()
	}
}

// warmUpBackend loads the scripts and opens a connection: one grant and
// release of a name of its own.
func warmUpBackend(t *testing.T, b *dredis.Backend) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	g, _, err := b.Acquire(ctx, dlock.Request{Name: "warm-up", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, dlock.Hold{Name: "warm-up", Owner: "o", Token: g.Token, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
}
