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
