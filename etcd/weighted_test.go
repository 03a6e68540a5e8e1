package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// countingClient returns a Client on a backend of its own whose KV
// requests (Txn, Range) are counted in n.
func countingClient(t *testing.T, endpoint, prefix string, n *atomic.Int64) *dlock.Client {
	t.Helper()
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Txn") || strings.HasSuffix(method, "/Range") {
			n.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	be, err := etcd.Open(ctxT(t, 10*time.Second), endpoint, etcd.Prefix(prefix), etcd.DialOptions(count))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type acquired struct {
	l   *dlock.Lease
	err error
}

// waitFor starts acquire in a goroutine and returns once the name has
// keys keys (the request is queued).
func waitFor(t *testing.T, cli *clientv3.Client, lp string, keys int, acquire func() (*dlock.Lease, error)) chan acquired {
	t.Helper()
	ch := make(chan acquired, 1)
	go func() {
		l, err := acquire()
		ch <- acquired{l, err}
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := cli.Get(context.Background(), lp, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == int64(keys) {
			return ch
		}
		if time.Now().After(end) {
			t.Fatalf("the request was not queued: %v keys, want %d (%v)", resp.Count, keys, err)
		}
	}
}

func lockPrefix(t *testing.T, endpoint, prefix, name string) string {
	b := open(t, []string{endpoint}, prefix)
	defer b.Close()
	return etcd.LockPrefix(b, name)
}

// A release wakes only the waiters that now fit: a release that frees
// too little for the first waiter costs the waiters no request, and one
// that frees enough grants every waiter that fits.
func TestWeightedWaitersWokenOnlyWhenTheyFit(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	const prefix, name = "fit", "sem"
	cli := raw(t, []string{srv.Endpoint()})
	lp := lockPrefix(t, srv.Endpoint(), prefix, name)
	holders := client(t, []string{srv.Endpoint()}, prefix)
	h1, err := holders.Semaphore(name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := holders.Semaphore(name, 3, dlock.Weight(2)).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var reqs atomic.Int64
	wc := countingClient(t, srv.Endpoint(), prefix, &reqs)
	q1 := waitFor(t, cli, lp, 3, func() (*dlock.Lease, error) { return wc.Semaphore(name, 3, dlock.Weight(2)).Acquire(ctx) })
	q2 := waitFor(t, cli, lp, 4, func() (*dlock.Lease, error) { return wc.Semaphore(name, 3).Acquire(ctx) })

	before := reqs.Load()
	if err := h1.Unlock(ctx); err != nil { // frees 1: q1 (2) does not fit yet
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := reqs.Load() - before; n != 0 {
		t.Errorf("a release that let no waiter in cost the waiters %d requests, want 0", n)
	}
	select {
	case r := <-q1:
		t.Fatalf("a waiter of weight 2 was answered beside a holder of 2 of 3: %v", r.err)
	case r := <-q2:
		t.Fatalf("a waiter of weight 1 passed an earlier one: %v", r.err)
	default:
	}
	infos, err := holders.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Token != h2.Token() || infos[0].Weight != 2 || infos[0].Limit != 3 ||
		infos[0].Kind != dlock.KindSemaphore || infos[0].Waiters != 2 {
		t.Errorf("Inspect: %+v; want the holder of weight 2 of 3 with 2 waiters", infos)
	}

	if err := h2.Unlock(ctx); err != nil { // now both waiters fit
		t.Fatal(err)
	}
	r1, r2 := <-q1, <-q2
	if r1.err != nil || r2.err != nil {
		t.Fatalf("the waiters after the release: %v, %v", r1.err, r2.err)
	}
	if r1.l.Token() >= r2.l.Token() || r1.l.Token() <= h2.Token() {
		t.Errorf("tokens %d, %d after %d: want them increasing in queue order", r1.l.Token(), r2.l.Token(), h2.Token())
	}
	r1.l.Unlock(ctx)
	r2.l.Unlock(ctx)
}

// A downgrade lets in the readers that wait behind the writer, woken by
// the change of its key's weight (not by a deletion), while the downgraded
// lease still holds.
func TestDowngradeWakesReaders(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	const prefix, name = "down", "rw"
	cli := raw(t, []string{srv.Endpoint()})
	lp := lockPrefix(t, srv.Endpoint(), prefix, name)
	wc := client(t, []string{srv.Endpoint()}, prefix)
	w, err := wc.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := client(t, []string{srv.Endpoint()}, prefix)
	r := waitFor(t, cli, lp, 2, func() (*dlock.Lease, error) { return rc.RWMutex(name).RLock(ctx) })
	if err := w.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-r
	if got.err != nil {
		t.Fatalf("the reader after the writer downgraded: %v", got.err)
	}
	if err := w.Err(); err != nil {
		t.Errorf("the downgraded lease: %v", err)
	}
	infos, err := wc.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Weight != 1 || infos[1].Weight != 1 {
		t.Errorf("Inspect after the downgrade: %+v; want two readers", infos)
	}
	got.l.Unlock(ctx)
	if err := w.Unlock(ctx); err != nil { // a modified key: the release's slow path
		t.Fatalf("Unlock of the downgraded lease: %v", err)
	}
	if resp, err := cli.Get(ctx, lp, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Errorf("keys left after every lease was released: %v %v", resp, err)
	}
}

// Tokens increase across kinds of one name, and a mutex that asks for a
// name in use as a semaphore is refused and leaves no key behind: the
// semaphore's next permit is granted at once.
func TestWeightedTokensAndKinds(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	const prefix, name = "kinds", "n"
	cli := raw(t, []string{srv.Endpoint()})
	lp := lockPrefix(t, srv.Endpoint(), prefix, name)
	c := client(t, []string{srv.Endpoint()}, prefix)
	m, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Unlock(ctx)
	s, err := c.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token() <= m.Token() {
		t.Errorf("the semaphore's token %d is not above the mutex's %d", s.Token(), m.Token())
	}
	_, err = c.Mutex(name).Lock(ctx)
	var conflict *dlock.ConflictError
	if !errors.As(err, &conflict) || conflict.Kind != dlock.KindSemaphore || conflict.Limit != 2 {
		t.Fatalf("a mutex over a semaphore of 2: %v, want a ConflictError naming it", err)
	}
	if resp, err := cli.Get(ctx, lp, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
		t.Errorf("keys after the refused mutex: %v %v; want the semaphore's only", resp, err)
	}
	s2, err := c.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the second permit after a refused mutex: %v", err)
	}
	s.Unlock(ctx)
	s2.Unlock(ctx)
	m2, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Token() <= s2.Token() {
		t.Errorf("the mutex's token %d is not above the semaphore's %d", m2.Token(), s2.Token())
	}
	m2.Unlock(ctx)
}

// An owner that holds a permit re-enters it: the same token, one hold
// more, released by as many Unlocks; asking more weight is ErrUpgrade.
func TestWeightedReentry(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	c := client(t, []string{srv.Endpoint()}, "reenter")
	sem := c.Semaphore("s", 3, dlock.Owner("job-1"))
	a, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Semaphore("s", 3, dlock.Owner("job-1")).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() != a.Token() || b.Holds() != 2 {
		t.Errorf("re-entry: token %d holds %d, want %d and 2", b.Token(), b.Holds(), a.Token())
	}
	if _, err := c.Semaphore("s", 3, dlock.Owner("job-1"), dlock.Weight(2)).TryAcquire(ctx); !errors.Is(err, dlock.ErrUpgrade) {
		t.Errorf("more weight by the same owner: %v, want ErrUpgrade", err)
	}
	b.Unlock(ctx)
	if err := a.Err(); err != nil {
		t.Errorf("the outer hold after the inner Unlock: %v", err)
	}
	a.Unlock(ctx)
	if infos, err := c.Inspect(ctx, "s"); err != nil || len(infos) != 0 {
		t.Errorf("Inspect after both Unlocks: %+v %v", infos, err)
	}
}

// A weighted name's key edited by hand into an impossible state (more
// weight than the limit, no holds) fails a request with ErrForeignData,
// changes nothing, and is listed as bad.
func TestWeightedForeignData(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	const prefix = "wforeign"
	cli := raw(t, []string{srv.Endpoint()})
	c := client(t, []string{srv.Endpoint()}, prefix)
	for _, tc := range []struct{ name, value string }{
		{"over", `{"owner":"x","holds":1,"kind":1,"limit":3,"weight":5}`},
		{"holds", `{"owner":"x","holds":-1,"kind":1,"limit":3,"weight":1}`},
		{"kind", `{"owner":"x","holds":1,"kind":9,"limit":3,"weight":1}`},
	} {
		l, err := c.Semaphore(tc.name, 3).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lp := lockPrefix(t, srv.Endpoint(), prefix, tc.name)
		resp, err := cli.Get(ctx, lp, clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v %v", tc.name, resp, err)
		}
		kv := resp.Kvs[0]
		if _, err := cli.Put(ctx, string(kv.Key), tc.value, clientv3.WithIgnoreLease()); err != nil {
			t.Fatal(err)
		}
		if l2, err := c.Semaphore(tc.name, 3).TryAcquire(ctx); !errors.Is(err, dlock.ErrForeignData) {
			if l2 != nil {
				l2.Unlock(ctx)
			}
			t.Errorf("%s: TryAcquire beside %s: %v, want ErrForeignData", tc.name, tc.value, err)
		}
		if resp, err := cli.Get(ctx, lp, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
			t.Errorf("%s: keys after the refusal: %v %v; want the edited one only", tc.name, resp, err)
		}
		infos, err := c.Inspect(ctx, tc.name)
		if err != nil || len(infos) != 1 || infos[0].Bad == "" {
			t.Errorf("%s: Inspect: %+v %v; want the key marked bad", tc.name, infos, err)
		}
		if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
			t.Fatal(err)
		}
		l.Unlock(ctx)
	}
}
