package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

// publishes returns how many PUBLISH commands the server ran, scripts'
// included.
func publishes(t testing.TB, admin *goredis.Client) int64 {
	return int64(cmdStat(t, admin, "publish", "calls"))
}

// cmdStat returns a field of command cmd in the server's INFO
// commandstats ("calls", "usec_per_call" …), 0 if the command did not run.
func cmdStat(t testing.TB, admin *goredis.Client, cmd, field string) float64 {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
	}
	return 0
}

// TestUncontendedPublishesNothing: a release with nobody waiting
// publishes nothing (default and fair), and a fair hand-off between
// waiters of one process is woken without PUBLISH.
func TestUncontendedPublishesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := ctxFor(t, time.Minute)
	c := newDlock(t, newBackend(t, srv.Addr()))
	for _, opts := range [][]dlock.Option{nil, {dlock.Fair()}} {
		for range 20 {
			l, err := c.Mutex("quiet", opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := publishes(t, admin); n != 0 {
		t.Errorf("40 uncontended Lock/Unlock pairs published %d times, want 0", n)
	}

	// A fair waiter on another Backend of this process.
	h, err := c.Mutex("local-fair", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := newDlock(t, newBackend(t, srv.Addr(), dredis.WaiterTimeout(30*time.Second)))
	const ttl = 10 * time.Second
	res := waitFor(t, other, "local-fair", ctx, dlock.Fair(), dlock.TTL(ttl))
	before := publishes(t, admin)
	released := time.Now()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter's bound is a third of its 30s waiter timeout: a grant
	// well before it came from the wake-up.
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatal(r.err)
		}
		// The lock was handed over by the release: the lease's validity
		// counts from before it was sent.
		if dl := r.l.Deadline(); dl.After(released.Add(ttl)) {
			t.Errorf("the handed-over lease's deadline is %v after the release was sent, beyond its TTL %v", dl.Sub(released), ttl)
		}
		r.l.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the fair waiter of this process was not woken by the release")
	}
	if n := publishes(t, admin) - before; n != 0 {
		t.Errorf("a fair hand-off within one process published %d times, want 0", n)
	}
}

const waiterHelperEnv = "DLOCK_REDIS_WAITER_HELPER"

// TestHelperWaiter is the other process of TestReleaseWakesAnotherProcess:
// it waits for a lock and says when it queued and when it was granted.
func TestHelperWaiter(t *testing.T) {
	spec := os.Getenv(waiterHelperEnv)
	if spec == "" {
		t.Skip("the helper process of TestReleaseWakesAnotherProcess")
	}
	addr, name, _ := strings.Cut(spec, " ")
	name, fair, _ := strings.Cut(name, " ")
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	b, err := dredis.New(rdb, dredis.WaiterTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []dlock.Option{dlock.OnWait(func(dlock.Holder) { fmt.Println("QUEUED") })}
	if fair == "fair" {
		opts = append(opts, dlock.Fair())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Mutex(name, opts...).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("GRANTED")
	l.Unlock(ctx)
}

// TestReleaseWakesAnotherProcess: a waiter in another process (default and
// fair) is woken by the release through pub/sub, long before its own
// bound (the holder's 60s lease, or a third of a 30s waiter timeout).
func TestReleaseWakesAnotherProcess(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	for _, fair := range []string{"default", "fair"} {
		t.Run(fair, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			var opts []dlock.Option
			if fair == "fair" {
				opts = append(opts, dlock.Fair())
			}
			name := "cross-" + fair
			holder := newDlock(t, newBackend(t, srv.Addr()), dlock.TTL(time.Minute))
			h, err := holder.Mutex(name, opts...).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWaiter$", "-test.v")
			cmd.Env = append(os.Environ(), waiterHelperEnv+"="+srv.Addr()+" "+name+" "+fair)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			lines := make(chan string, 16)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			expect := func(word string, within time.Duration) {
				t.Helper()
				timeout := time.After(within)
				for {
					select {
					case line, ok := <-lines:
						if !ok {
							t.Fatalf("the helper ended before it said %s", word)
						}
						if strings.Contains(line, word) {
							return
						}
					case <-timeout:
						t.Fatalf("the helper did not say %s within %v", word, within)
					}
				}
			}
			expect("QUEUED", 30*time.Second)
			// A release before the helper's subscription is confirmed would
			// be answered by the attempt the helper makes on confirmation,
			// not by a notice. Let it subscribe and make that attempt, so
			// that the release below has to wake it. (Too short a pause
			// makes the test pass without showing anything, never fail.)
			for {
				n, err := admin.PubSubNumSub(ctx, "dlock:{"+name+"}:wake").Result()
				if err != nil {
					t.Fatal(err)
				}
				if n["dlock:{"+name+"}:wake"] > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			expect("GRANTED", 5*time.Second)
		})
	}
}

// TestFairHandOff: a release hands a fair lock straight to the head of the
// queue when that waiter is in the releasing process. The waiter's next
// Acquire returns the grant without asking the server; a waiter that gives
// up instead gives the handed-over grant back.
func TestFairHandOff(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	b1, b2 := newBackend(t, srv.Addr()), newBackend(t, srv.Addr())
	admin := newClient(t, srv.Addr())
	const ttl = 30 * time.Second
	for _, giveUp := range []bool{false, true} {
		name := fmt.Sprintf("handoff-%v", giveUp)
		g, _, err := b1.Acquire(ctx, dlock.Request{Name: name, Owner: "holder", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		_, w, err := b2.Acquire(ctx, dlock.Request{Name: name, Owner: "waiter", TTL: ttl, Fair: true, Wait: true})
		if w == nil {
			t.Fatalf("fair Acquire of a held lock: %v, and no waiter", err)
		}
		if err := b1.Release(ctx, dlock.Hold{Name: name, Owner: "holder", Token: g.Token, Handle: g.Handle}); err != nil {
			t.Fatal(err)
		}
		// The lock is the waiter's already.
		owner, err := admin.HGet(ctx, "dlock:{"+name+"}", "o").Result()
		if err != nil || owner != "waiter" {
			t.Fatalf("after the release the lock's owner is %q (%v), want the waiting fair request's", owner, err)
		}
		if giveUp {
			if err := w.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			g3, _, err := b1.Acquire(ctx, dlock.Request{Name: name, Owner: "third", TTL: ttl})
			if err != nil {
				t.Fatalf("after the waiter gave up the handed-over grant, TryLock: %v", err)
			}
			if g3.Token <= g.Token {
				t.Errorf("token %d after the given-back grant is not above %d", g3.Token, g.Token)
			}
			continue
		}
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		calls := cmdStat(t, admin, "evalsha", "calls")
		g2, err := w.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := cmdStat(t, admin, "evalsha", "calls") - calls; n != 0 {
			t.Errorf("the handed-over grant took %v script calls, want none", n)
		}
		if g2.Token <= g.Token || g2.Count != 1 || g2.Age <= 0 {
			t.Errorf("handed-over grant %+v after token %d: want a greater token, count 1 and an age", g2, g.Token)
		}
		if err := b2.Release(ctx, dlock.Hold{Name: name, Owner: "waiter", Token: g2.Token, Handle: g2.Handle}); err != nil {
			t.Fatal(err)
		}
	}
}
