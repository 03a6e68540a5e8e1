package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	"google.golang.org/grpc"
)

// methodLog records the unary gRPC methods a backend calls.
type methodLog struct {
	mu    sync.Mutex
	calls []string
}

func (m *methodLog) dialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		m.mu.Lock()
		m.calls = append(m.calls, method[strings.LastIndexByte(method, '/')+1:])
		m.mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// since returns the methods called since the n-th call, and the count.
func (m *methodLog) since(n int) ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls[n:]...), len(m.calls)
}

// A hold of a fresh owner is released with a plain deletion of its key (a
// transaction would cost etcd 3.4 a copy of its write buffer), one of an
// explicit owner, whom another client may have re-entered, with the
// comparing transaction; either way the lock is free after.
func TestReleaseOfFreshOwnerDeletes(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, time.Minute)
	var log methodLog
	be, err := etcd.Open(ctx, srv.Addr(), etcd.Prefix("rel"), etcd.DialOptions(log.dialOption()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := client(t, eps, "rel")
	for _, tc := range []struct {
		name string
		opts []dlock.Option
		want string
	}{
		{"fresh owner", nil, "DeleteRange"},
		{"explicit owner", []dlock.Option{dlock.Owner("job")}, "Txn"},
	} {
		l, err := c.Mutex("x", tc.opts...).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, n := log.since(0)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", tc.name, err)
		}
		if calls, _ := log.since(n); len(calls) != 1 || calls[0] != tc.want {
			t.Errorf("%s: the release called %v, want [%s]", tc.name, calls, tc.want)
		}
		l2, err := other.Mutex("x").TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: TryLock after the release: %v", tc.name, err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("%s: token %d after %d", tc.name, l2.Token(), l.Token())
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A reentry through WithLease adds a hold to a fresh owner's key: the outer
// hold's release, even first, then takes one hold off instead of deleting
// the key, and the lock stays held until the inner hold is released too.
func TestFreshOwnerReenteredReleasedOuterFirst(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, time.Minute)
	a, b := client(t, eps, "reent"), client(t, eps, "reent")
	m := a.Mutex("x")
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(dlock.WithLease(ctx, outer))
	if err != nil {
		t.Fatal(err)
	}
	if inner.Holds() != 2 || inner.Token() != outer.Token() {
		t.Fatalf("inner: holds %d token %d, want 2 and %d", inner.Holds(), inner.Token(), outer.Token())
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatalf("outer Unlock: %v", err)
	}
	if l, err := b.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			l.Unlock(ctx)
		}
		t.Fatalf("TryLock while the inner hold is held: %v, want ErrNotAcquired", err)
	}
	if err := inner.Extend(ctx, dlock.DefaultTTL); err != nil {
		t.Errorf("inner Extend after the outer release: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatalf("inner Unlock: %v", err)
	}
	l, err := b.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after both releases: %v", err)
	}
	l.Unlock(ctx)
}
