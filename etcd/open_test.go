package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/opentest"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestOpenFails: Open of an etcd:// URL that reaches no etcd returns
// within its context and says why. Before, every case said only "no
// answer from ... within 5s".
func TestOpenFails(t *testing.T) {
	opentest.Run(t, opentest.Cases(t, "etcd", "not an etcd server", opentest.OtherServer(t),
		func(addr, q string) string { return "etcd://" + addr + "?" + q }))
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr string
		bad       bool
	}{
		{url: "etcd://h1:2379,h2:2379/p", addr: "h1:2379,h2:2379"},
		{url: "etcd://u:pw@h1:2379/p?connect_timeout=3s", addr: "h1:2379"},
		{url: "etcd://h1:2379?dial-timeout=3s", addr: "h1:2379"},
		{url: "etcd://h1:2379?connect_timeout=0", addr: "h1:2379"},
		{url: "etcd:///x", bad: true},
		{url: "etcd://h:1,,h:2/x", bad: true},
		{url: "etcd://h:1/x?nope=1", bad: true},
		{url: "etcd://h:1/x?dial-timeout=soon", bad: true},
		{url: "etcd://h:1/x?connect_timeout=-1s", bad: true},
		{url: "etcd://h:1/x?connect_timeout=1s&connect_timeout=2s", bad: true},
		{url: "etcd://h:1/x?connect_timeout=1s&dial-timeout=2s", bad: true},
		{url: "etcd://h:1/x?a=1;b=2", bad: true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		addr, _, err := etcd.ParseURL(u)
		switch {
		case tc.bad && !errors.Is(err, dlock.ErrInvalidOption):
			t.Errorf("%s: %v, want ErrInvalidOption", tc.url, err)
		case tc.bad && !strings.Contains(err.Error(), "etcd"):
			t.Errorf("%s: %v does not name the backend", tc.url, err)
		case !tc.bad && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case !tc.bad && addr != tc.addr:
			t.Errorf("%s: addr %q, want %q", tc.url, addr, tc.addr)
		}
	}
}

// New works on the caller's client, which Close leaves open, and refuses
// what it cannot use.
func TestNew(t *testing.T) {
	if _, err := etcd.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	srv := testserver.Etcd(t, fastElection)
	cli := raw(t, []string{srv.Endpoint()})
	if _, err := etcd.New(cli, etcd.Auth("u", "p")); !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "Auth") {
		t.Errorf("New with Auth: %v, want ErrInvalidOption naming Auth", err)
	}
	if _, err := etcd.Open(context.Background(), "", etcd.Prefix("x")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Open with no endpoints: %v, want ErrInvalidOption", err)
	}
	b, err := etcd.New(cli, etcd.Prefix("new"))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c, err := dlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	l, err := c.Mutex("n").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := cli.Get(ctx, "new/n/", clientv3.WithPrefix()); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}

// TestOpenOptions: the client options reach Open's client. With TLS, Open
// of a plain-text etcd (which the same Open without TLS reaches) fails;
// DialOptions' interceptor sees Open's request.
func TestOpenOptions(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	if b, err := etcd.Open(ctx, srv.Addr(), etcd.TLS(&tls.Config{}), etcd.ConnectTimeout(2*time.Second)); !errors.Is(err, dlock.ErrBackendUnavailable) {
		if b != nil {
			b.Close()
		}
		t.Errorf("Open over TLS of a plain-text etcd: %v, want ErrBackendUnavailable", err)
	}
	var calls atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	b, err := etcd.Open(ctx, srv.Addr(), etcd.DialOptions(count), etcd.Logger(zap.NewNop()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if calls.Load() == 0 {
		t.Errorf("the DialOptions interceptor saw no request of Open")
	}
}

// TestOpenRefusedFast: Open of a port where nothing listens fails with
// ErrBackendUnavailable, saying so, without waiting for its connect
// timeout (gRPC dials a refused endpoint again until then). Before, it
// took the whole 10 s. The bound is half the timeout: a behaviour check,
// not a speed one.
func TestOpenRefusedFast(t *testing.T) {
	a, b := opentest.ClosedPort(t), opentest.ClosedPort(t)
	for _, addr := range []string{a, a + "," + b} {
		opentest.Check(t, opentest.Case{URL: "etcd://" + addr, Addr: addr, Backend: "etcd", Reason: "connection refused",
			Timeout: time.Minute, Bound: etcd.DefaultDialTimeout / 2})
	}
}
