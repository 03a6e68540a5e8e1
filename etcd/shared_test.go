package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The holds of one backend with one TTL share a lease: locking and
// unlocking grants and revokes none after the first, and the keys of two
// holds are on the same lease, each its own key.
func TestSharedLease(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, time.Minute)
	c, grants, revokes := leaseCountingClient(t, srv.Endpoint(), "shared")
	defer c.Close()
	for range 20 {
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if g, r := grants.Load(), revokes.Load(); g != 1 || r != 0 {
		t.Errorf("20 lock+unlock: %d lease grants and %d revocations, want 1 and 0", g, r)
	}

	a, err := c.Mutex("a").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Mutex("b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := raw(t, eps)
	resp, err := cli.Get(ctx, "shared/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("keys of two holds: %v, %v", resp, err)
	}
	k0, k1 := resp.Kvs[0], resp.Kvs[1]
	if k0.Lease != k1.Lease || string(k0.Key) == string(k1.Key) {
		t.Fatalf("two holds: keys %s (lease %x) and %s (lease %x), want their own keys on one lease", k0.Key, k0.Lease, k1.Key, k1.Lease)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(k0.Lease)); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the shared lease after one of its holds was released: %v, %v", ttl, err)
	}
	if err := b.Err(); err != nil {
		t.Fatalf("the other hold after one was released: %v", err)
	}

	// Revoked from outside, the lease ends the hold on it; the next Lock
	// takes a new lease.
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(k0.Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(8 * time.Second):
		t.Fatal("the hold on the revoked lease is not Done after its TTL")
	}
	if err := b.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("the hold on the revoked lease: Err() = %v, want ErrLeaseLost", err)
	}
	l, err := c.Mutex("c").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the shared lease was revoked: %v", err)
	}
	defer l.Unlock(ctx)
	resp, err = cli.Get(ctx, "shared/c/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == k0.Lease {
		t.Fatalf("the new hold's key: %v, %v; want one on a new lease", resp, err)
	}
}

// A hold that its Client gave up without releasing it (a renewal or a
// release that failed) does not keep its lock for ever, although the
// backend keeps the lease it is on alive for its other holds: its key goes
// once its TTL has passed without a renewal, as a lease of its own would.
func TestAbandonedHoldExpires(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	be := open(t, eps, "abandon")
	defer be.Close()
	ctx := ctxT(t, time.Minute)
	const ttl = 2 * time.Second
	if _, _, err := be.Acquire(ctx, dlock.Request{Name: "gone", Owner: "o1", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	kept, _, err := be.Acquire(ctx, dlock.Request{Name: "kept", Owner: "o2", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	hold := dlock.Hold{Name: "kept", Owner: "o2", Token: kept.Token, Handle: kept.Handle}
	cli := raw(t, eps)
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		if err := be.Renew(ctx, hold, ttl); err != nil {
			t.Fatalf("renewing the kept hold: %v", err)
		}
	}
	resp, err := cli.Get(ctx, "abandon/gone/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the abandoned hold's key %v after %v without renewal: %v", resp.Kvs, 3*ttl, err)
	}
	resp, err = cli.Get(ctx, "abandon/kept/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the renewed hold's key: %v, %v", resp, err)
	}
	if err := be.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
}

// leaseCountingClient returns a Client with an 8 s TTL on a backend that
// counts the lease grants and revocations it sends.
func leaseCountingClient(t *testing.T, addr, prefix string) (_ *dlock.Client, grants, revokes *atomic.Int64) {
	grants, revokes = new(atomic.Int64), new(atomic.Int64)
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch {
		case strings.HasSuffix(method, "/LeaseGrant"):
			grants.Add(1)
		case strings.HasSuffix(method, "/LeaseRevoke"):
			revokes.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	be, err := etcd.Open(ctxT(t, 10*time.Second), addr, etcd.Prefix(prefix), etcd.DialOptions(count))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(be, dlock.TTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c, grants, revokes
}

// Renewing many holds on the backend's shared lease, in calls of a few
// hundred as a Client makes them, costs etcd a number of requests per
// round that does not grow with the holds or the calls: one listing of the
// lease's keys and one keep-alive per call, no read of a key. (A listing per
// call made 100,000 holds cost 100 listings of 100,000 keys every renewal
// period.) Every round still looks at the keys anew: a key deleted by
// someone else is found gone at the next renewal. An acquisition among
// many holds costs what it costs alone.
func TestRenewManyHoldsOnSharedLease(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, 5*time.Minute)
	var cnt requestCounter
	be, err := etcd.Open(ctx, srv.Endpoint(), etcd.Prefix("many"), etcd.DialOptions(cnt.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	const (
		n   = 4096
		per = 512 // holds per RenewBatch call
		ttl = time.Minute
	)
	rs := acquireMany(t, ctx, be, n, ttl)

	for round := 1; round <= 3; round++ {
		if round == 3 {
			// Someone else deletes one hold's key.
			cli := raw(t, []string{srv.Endpoint()})
			if _, err := cli.Delete(ctx, keyOf(t, ctx, cli, be, rs[7].Hold)); err != nil {
				t.Fatal(err)
			}
		}
		before := cnt.snapshot()
		for off := 0; off < n; off += per {
			for i, err := range be.RenewBatch(ctx, rs[off:off+per]) {
				lost := round == 3 && off+i == 7
				switch {
				case lost && !errors.Is(err, dlock.ErrLeaseLost):
					t.Fatalf("round %d: renewing the hold whose key was deleted: %v, want ErrLeaseLost", round, err)
				case !lost && err != nil:
					t.Fatalf("round %d: renewing hold %d: %v", round, off+i, err)
				}
			}
		}
		d := cnt.snapshot().minus(before)
		t.Logf("round %d: %d holds in %d calls: %v", round, n, n/per, d)
		// The listing of round 3 lacks the deleted key, which is read.
		reads := 0
		if round == 3 {
			reads = 1
		}
		if d.listings > 1 || d.reads > reads || d.keepAlives > n/per || d.other != 0 {
			t.Errorf("round %d: renewing %d holds on one lease in %d calls sent %v; want at most 1 listing, %d reads, %d keep-alives and nothing else",
				round, n, n/per, d, reads, n/per)
		}
	}

	before := cnt.snapshot()
	if _, _, err := be.Acquire(ctx, dlock.Request{Name: "one-more", Owner: "o", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if d := cnt.snapshot().minus(before); d.reads != 1 || d.listings+d.other != 0 || d.keepAlives > 1 {
		t.Errorf("an acquisition among %d holds sent %v; want one transaction and at most one keep-alive", n, d)
	}
}

// acquireMany takes n locks on be with TTL ttl and returns their renewals.
func acquireMany(t *testing.T, ctx context.Context, be *etcd.Backend, n int, ttl time.Duration) []dlock.Renewal {
	t.Helper()
	rs := make([]dlock.Renewal, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && failed.Load() == nil; i = int(next.Add(1) - 1) {
				req := dlock.Request{Name: fmt.Sprint("m", i), Owner: "o", TTL: ttl}
				g, _, err := be.Acquire(ctx, req)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				rs[i] = dlock.Renewal{Hold: dlock.Hold{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle}, TTL: ttl}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("acquiring %d locks: %v", n, *err)
	}
	return rs
}

// keyOf returns the key of hold h on be.
func keyOf(t *testing.T, ctx context.Context, cli *clientv3.Client, be *etcd.Backend, h dlock.Hold) string {
	t.Helper()
	resp, err := cli.Get(ctx, etcd.LockPrefix(be, h.Name), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(h.Token) {
		t.Fatalf("the key of %s: %v, %v", h.Name, resp, err)
	}
	return string(resp.Kvs[0].Key)
}

// requestCounter counts the requests a backend sends etcd, by kind, with
// gRPC client interceptors.
type requestCounter struct {
	listings, reads, keepAlives, other atomic.Int64
}

// requests is a count of requests by kind.
type requests struct{ listings, reads, keepAlives, other int }

func (r requests) String() string {
	return fmt.Sprintf("%d listings of a lease's keys, %d reads, %d keep-alives, %d others", r.listings, r.reads, r.keepAlives, r.other)
}

func (r requests) minus(s requests) requests {
	return requests{r.listings - s.listings, r.reads - s.reads, r.keepAlives - s.keepAlives, r.other - s.other}
}

func (c *requestCounter) snapshot() requests {
	return requests{int(c.listings.Load()), int(c.reads.Load()), int(c.keepAlives.Load()), int(c.other.Load())}
}

func (c *requestCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			switch {
			case strings.HasSuffix(method, "/LeaseTimeToLive"):
				c.listings.Add(1)
			case strings.HasSuffix(method, "/Range"), strings.HasSuffix(method, "/Txn"):
				c.reads.Add(1)
			default:
				c.other.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
				return s, err
			}
			return &keepAliveCounting{ClientStream: s, n: &c.keepAlives}, nil
		}),
	}
}

// keepAliveCounting counts the keep-alives sent on a LeaseKeepAlive stream.
type keepAliveCounting struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s *keepAliveCounting) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}
