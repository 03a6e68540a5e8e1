package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

type leaseResult struct {
	l   *dlock.Lease
	err error
}

// waiters returns the number of waiters Inspect shows for name.
func waiters(t *testing.T, b *zookeeper.Backend, name string) int {
	t.Helper()
	infos, err := b.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, li := range infos {
		if li.Name == name {
			return li.Waiters
		}
	}
	return 0
}

// TestSemaphoreWakesOnlyTheNext: a release of a semaphore wakes the first
// waiter, whose grant wakes the next; the waiters behind get no watch
// event and send no request (no herd).
func TestSemaphoreWakesOnlyTheNext(t *testing.T) {
	srv := zkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "herd"
	hb := connect(t, []string{srv.Addr()})
	hc := client(t, hb)
	h1, err := hc.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := hc.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	bs := make([]*zookeeper.Backend, n)
	res := make([]chan leaseResult, n)
	for i := range n {
		bs[i] = connect(t, []string{srv.Addr()})
		c := client(t, bs[i])
		res[i] = make(chan leaseResult, 1)
		go func() {
			l, err := c.Semaphore(name, 2).Acquire(ctx)
			res[i] <- leaseResult{l, err}
		}()
		// One at a time, so that the queue is in this order.
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return waiters(t, hb, name) == i+1 })
	}
	// A waiter's node is there before its first look and watch are: let
	// every waiter settle (no request for 300 ms) before counting.
	before := make([]zookeeper.Stats, n)
	settled := func() bool {
		for i, b := range bs {
			before[i] = b.Stats()
		}
		time.Sleep(300 * time.Millisecond)
		for i, b := range bs {
			if b.Stats().Total() != before[i].Total() {
				return false
			}
		}
		return true
	}
	waitFor(t, "the waiters to settle", settled)
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res[0]
	if r.err != nil {
		t.Fatalf("the first waiter: %v", r.err)
	}
	// The second is woken by the first's grant, and finds the
	// semaphore full.
	waitFor(t, "the second waiter to be woken", func() bool { return bs[1].Stats().WatchEvents > before[1].WatchEvents })
	time.Sleep(100 * time.Millisecond) // a herd's events would have come with the second's
	for i := 2; i < n; i++ {
		after := bs[i].Stats()
		if after.WatchEvents != before[i].WatchEvents || after.Total() != before[i].Total() {
			t.Errorf("waiter %d, behind the next in line, got %d watch event(s) and sent %d request(s) at a release",
				i, after.WatchEvents-before[i].WatchEvents, after.Total()-before[i].Total())
		}
	}
	select {
	case r := <-res[1]:
		t.Fatalf("the second waiter was granted beside two holders: %v", r.err)
	default:
	}
	// Every waiter gets its turn as the holders leave.
	held := []*dlock.Lease{h2, r.l}
	for i := 1; i < n; i++ {
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-res[i]
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		held = append(held[1:], r.l)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDowngradeLetsReadersIn: a reader that waits for a writer is woken by
// the writer's downgrade (a data watch) and shares the lock with it.
func TestDowngradeLetsReadersIn(t *testing.T) {
	srv := zkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "downgrade"
	wb := connect(t, []string{srv.Addr()})
	w, err := client(t, wb).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := client(t, connect(t, []string{srv.Addr()}))
	res := make(chan leaseResult, 1)
	go func() {
		l, err := rc.RWMutex(name).RLock(ctx)
		res <- leaseResult{l, err}
	}()
	waitFor(t, "the reader to queue", func() bool { return waiters(t, wb, name) == 1 })
	if err := w.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("the reader after the downgrade: %v", r.err)
	}
	infos, err := wb.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Weight != 1 || infos[1].Weight != 1 || infos[0].Token != w.Token() || infos[0].Kind != dlock.KindRWMutex || infos[0].Limit != dlock.RWLimit {
		t.Errorf("Inspect after the downgrade: %+v, want the downgraded writer (token %d) and the reader, weight 1 each", infos, w.Token())
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWeightedRefusalsLeaveNothing: a request whose kind or limit
// disagrees with the holder's, and a request facing a hand-edited node (a
// weight above its limit), fail and leave no node of their own.
func TestWeightedRefusalsLeaveNothing(t *testing.T) {
	srv := zkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := connect(t, []string{srv.Addr()})
	c := client(t, b)
	kids := func(name string) []string {
		t.Helper()
		k, _, err := b.Conn().Children(zookeeper.LockPath(b, name))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	held, err := c.Semaphore("sem", 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, try := range map[string]func() (*dlock.Lease, error){
		"a mutex":          func() (*dlock.Lease, error) { return c.Mutex("sem").Lock(ctx) },
		"a semaphore of 3": func() (*dlock.Lease, error) { return c.Semaphore("sem", 3).Acquire(ctx) },
		"a reader":         func() (*dlock.Lease, error) { return c.RWMutex("sem").RLock(ctx) },
		"an election":      func() (*dlock.Lease, error) { return c.Election("sem").Campaign(ctx, "v") },
	} {
		l, err := try()
		var ce *dlock.ConflictError
		if err == nil || !errors.As(err, &ce) || !errors.Is(err, dlock.ErrInvalidOption) {
			if l != nil {
				l.Unlock(ctx)
			}
			t.Errorf("%s over a semaphore of 2: %v, want a ConflictError", what, err)
		}
		if k := kids("sem"); len(k) != 1 {
			t.Errorf("after %s was refused the queue has %d nodes: %v", what, len(k), k)
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A node of a semaphore of 2 edited by hand to weigh 5, ephemeral
	// like dlock's, at the head of the queue.
	parent := zookeeper.LockPath(b, "edited")
	conn := b.Conn()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Create(parent[:strings.LastIndexByte(parent, '/')], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := conn.CreateContainer(parent, nil, zk.FlagContainer, acl); err != nil {
		t.Fatal(err)
	}
	data := `{"owner":"someone","count":1,"kind":1,"limit":2,"weight":5}`
	if _, err := conn.Create(parent+"/_c_"+strings.Repeat("e", 32)+"-lock-", []byte(data), zk.FlagEphemeralSequential, acl); err != nil {
		t.Fatal(err)
	}
	l, err := c.Semaphore("edited", 2).TryAcquire(ctx)
	if !errors.Is(err, dlock.ErrForeignData) || !strings.Contains(err.Error(), "weight 5") {
		if l != nil {
			l.Unlock(ctx)
		}
		t.Errorf("TryAcquire behind a node weighing 5 of 2: %v, want ErrForeignData naming the weight", err)
	}
	if k := kids("edited"); len(k) != 1 {
		t.Errorf("after the refusal the queue has %d nodes: %v", len(k), k)
	}
	infos, err := b.Inspect(ctx, "edited")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || !strings.Contains(infos[0].Bad, "weight 5") {
		t.Errorf("Inspect of the edited node: %+v, want one row whose Bad names the weight", infos)
	}
}
