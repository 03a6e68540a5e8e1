package etcd_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Locking and unlocking one name again and again puts the same key again
// (etcd keeps an index entry per deleted key until compaction, and reads
// of the lock's prefix walk them), each time with a greater token.
func TestReleasedKeyIsUsedAgain(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, time.Minute)
	cli := raw(t, eps)
	start, err := cli.Get(ctx, "reuse-check")
	if err != nil {
		t.Fatal(err)
	}
	be := open(t, eps, "reuse")
	c, err := dlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 30
	var last uint64
	for range n {
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The history since the start: every key put under the lock's prefix.
	wch := cli.Watch(ctx, etcd.LockPrefix(be, "x"), clientv3.WithPrefix(),
		clientv3.WithRev(start.Header.Revision+1), clientv3.WithFilterDelete())
	keys := make(map[string]int)
	for puts := 0; puts < n; {
		resp, ok := <-wch
		if !ok || resp.Err() != nil {
			t.Fatalf("watching the history: %v", resp.Err())
		}
		for _, ev := range resp.Events {
			keys[string(ev.Kv.Key)]++
			puts++
		}
	}
	if len(keys) != 1 {
		t.Errorf("%d lock+unlock of one name put %d keys, want 1: %v", n, len(keys), keys)
	}
}

// The waiters of one lock in one backend share one etcd watch, opened by
// the first and kept across hand-offs, and every one of them is granted.
func TestWaitersShareOneWatch(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	ctx := ctxT(t, time.Minute)
	var creates atomic.Int64
	count := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return watchCreates{s, &creates}, nil
	})
	be, err := etcd.Open(ctx, srv.Endpoint(), etcd.Prefix("share"), etcd.DialOptions(count))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	var wg sync.WaitGroup
	var granted atomic.Int64
	for range waiters {
		wg.Go(func() {
			for range 3 {
				l, err := c.Mutex("w").Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(1)
				time.Sleep(time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // let them queue
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if g := granted.Load(); g != 3*waiters {
		t.Fatalf("%d grants, want %d", g, 3*waiters)
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d waiters, %d grants: %d watches created, want 1", waiters, 3*waiters, n)
	}
}

// watchCreates counts the watch creation requests sent on a stream.
type watchCreates struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s watchCreates) SendMsg(m any) error {
	if r, ok := m.(*pb.WatchRequest); ok && r.GetCreateRequest() != nil {
		s.n.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}
