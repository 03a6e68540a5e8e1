package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testserver"
	dredis "github.com/dlock-dev/dlock/redis"
	goredis "github.com/redis/go-redis/v9"
)

const helperEnv = "DLOCK_REDIS_FAIR_HELPER"

// TestHelperFairWaiter is the process that TestFairDeadWaiter kills: it
// queues as a fair waiter and waits.
func TestHelperFairWaiter(t *testing.T) {
	addr := os.Getenv(helperEnv)
	if addr == "" {
		t.Skip("the helper process of TestFairDeadWaiter")
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	b, err := dredis.New(rdb, dredis.WaiterTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("fair-dead", dlock.Fair(), dlock.OnWait(func(dlock.Holder) { fmt.Println("QUEUED") }))
	_, err = m.Lock(context.Background())
	t.Fatalf("the helper's Lock returned: %v", err)
}

// TestFairDeadWaiter: a fair waiter whose process is killed holds up the
// queue for its waiter timeout at most.
func TestFairDeadWaiter(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	holder := newDlock(t, newBackend(t, srv.Addr()))
	h, err := holder.Mutex("fair-dead", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFairWaiter$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	queued := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "QUEUED") {
				queued <- true
				break
			}
		}
		for sc.Scan() {
		}
		close(queued)
	}()
	select {
	case ok := <-queued:
		if !ok {
			t.Fatal("the helper process ended before it queued")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the helper process did not queue within 30s")
	}

	later := newDlock(t, newBackend(t, srv.Addr(), dredis.WaiterTimeout(time.Second)))
	res := waitFor(t, later, "fair-dead", ctx, dlock.Fair())
	infos, err := holder.Inspect(ctx, "fair-dead")
	if err != nil || len(infos) != 1 || infos[0].Queued != 2 {
		t.Fatalf("Inspect with two fair waiters queued: %+v, %v", infos, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed = true
	released := time.Now()
	h.Unlock(ctx)
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("granted %v after the release, past the dead waiter", time.Since(released))
		r.l.Unlock(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a dead one was not granted within 10s (waiter timeout 1s)")
	}
}

// TestFairKeepsPlace: waiters that wait longer than their waiter timeout
// keep their places in the queue (they show they are alive).
func TestFairKeepsPlace(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := ctxFor(t, time.Minute)
	const wt = 400 * time.Millisecond
	holder := newDlock(t, newBackend(t, srv.Addr()))
	h, err := holder.Mutex("fair-keep", dlock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := waitFor(t, newDlock(t, newBackend(t, srv.Addr(), dredis.WaiterTimeout(wt))), "fair-keep", ctx, dlock.Fair())
	second := waitFor(t, newDlock(t, newBackend(t, srv.Addr(), dredis.WaiterTimeout(wt))), "fair-keep", ctx, dlock.Fair())
	time.Sleep(5 * wt)
	h.Unlock(ctx)
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case r2 := <-second:
		t.Fatalf("the second waiter was granted (%v) while the first held the lock", r2.err)
	case <-time.After(100 * time.Millisecond):
	}
	r.l.Unlock(ctx)
	if r2 := <-second; r2.err != nil {
		t.Fatal(r2.err)
	} else {
		r2.l.Unlock(ctx)
	}
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

// waitFor starts a Lock of name on c and returns once it waits.
func waitFor(t testing.TB, c *dlock.Client, name string, ctx context.Context, opts ...dlock.Option) <-chan lockResult {
	t.Helper()
	res := make(chan lockResult, 1)
	waiting := make(chan struct{})
	var once sync.Once
	opts = append(opts, dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) }))
	m := c.Mutex(name, opts...)
	go func() {
		l, err := m.Lock(ctx)
		res <- lockResult{l, err}
	}()
	select {
	case <-waiting:
	case r := <-res:
		t.Fatalf("Lock(%s) did not wait: %v", name, r.err)
	}
	return res
}
