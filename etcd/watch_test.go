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

// Clients in a queue longer than the part a waiter reads at its enqueue
// (so waiters both near the head and far back) exclude each other, and
// their tokens increase in the order of the grants.
func TestLongQueueExcludes(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, 2*time.Minute)
	const clients, rounds = 12, 5
	var (
		mu      sync.Mutex
		holding bool
		last    uint64
		wg      sync.WaitGroup
	)
	for range clients {
		c := client(t, eps, "long")
		wg.Go(func() {
			for range rounds {
				l, err := c.Mutex("q").Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if holding {
					t.Errorf("token %d granted while another client holds the lock", l.Token())
				}
				if l.Token() <= last {
					t.Errorf("token %d granted after %d", l.Token(), last)
				}
				holding, last = true, l.Token()
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding = false
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A waiter whose predecessor gives up while the holder still holds is not
// granted: the watch saw one key before it go, not all of them.
func TestCancelledPredecessorDoesNotGrant(t *testing.T) {
	srv := testserver.Etcd(t, fastElection)
	eps := []string{srv.Endpoint()}
	ctx := ctxT(t, time.Minute)
	h, w1, w2 := client(t, eps, "cancel"), client(t, eps, "cancel"), client(t, eps, "cancel")
	held, err := h.Mutex("c").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := w1.Mutex("c").Lock(ctx1)
		gave <- err
	}()
	time.Sleep(300 * time.Millisecond) // w1 is queued first
	granted := make(chan *dlock.Lease, 1)
	go func() {
		l, err := w2.Mutex("c").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	time.Sleep(300 * time.Millisecond)
	cancel1()
	if err := <-gave; err == nil {
		t.Fatal("the cancelled waiter was granted")
	}
	select {
	case <-granted:
		t.Fatal("granted while the holder holds, after the waiter before it gave up")
	case <-time.After(time.Second):
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		if l != nil {
			if l.Token() <= held.Token() {
				t.Errorf("token %d after %d", l.Token(), held.Token())
			}
			_ = l.Unlock(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not granted after the holder released")
	}
}
