package bench

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
)

// BenchmarkEtcdHandoff splits the hand-off of the Contended and
// Contended64 workloads (8 or 64 lockers, each on its own connection, on
// one name, 100 µs of work per hold) into where its time goes, for dlock
// and for concurrency.Mutex, from what each connection sends and receives
// (gRPC interceptors). Each metric has a p50 and a p99, in µs:
//
//   - release: from the release request's send (dlock: the transaction
//     that deletes the key; Mutex: its delete) to its answer;
//   - event: from that send to the arrival of the deletion's watch event
//     at the connection of the locker granted next;
//   - grant: from that arrival to the return of that locker's Lock (the
//     requests a waiter makes after the event are in here);
//   - handoff: from the release's send to that Lock's return.
//
// It is not one of BenchmarkEtcd's workloads (benchdoc does not run it).
//
//	cd bench && go test -run XXX -bench EtcdHandoff -benchtime 2000x
func BenchmarkEtcdHandoff(b *testing.B) {
	addr := os.Getenv("ETCD_ADDR")
	if addr == "" {
		addr = testserver.Etcd(b).Addr()
	}
	endpoints := []string{"http://" + addr}
	b.Run("dlock", func(b *testing.B) {
		handoffBreakdowns(b, func(b *testing.B, opts []grpc.DialOption) func(context.Context, string) (func(context.Context) error, error) {
			l, _ := newEtcdDlock(b, endpoints, opts...)
			return l.Lock
		})
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		handoffBreakdowns(b, func(b *testing.B, opts []grpc.DialOption) func(context.Context, string) (func(context.Context) error, error) {
			l, _ := newEtcdMutex(b, endpoints, opts...)
			return l.Lock
		})
	})
}

// handoffRec is one hand-off: the release that began it and the grant
// that ended it.
type handoffRec struct {
	key                   string
	sent, answered, event time.Time
	next                  int
	granted               time.Time
}

// handoffProbe matches releases, deletion events and grants.
type handoffProbe struct {
	mu     sync.Mutex
	cur    *handoffRec
	events []map[string]time.Time // by locker: the first deletion of a key since cur began
	done   []*handoffRec
}

func (p *handoffProbe) released(key string) func() {
	now := time.Now()
	p.mu.Lock()
	r := &handoffRec{key: key, sent: now, next: -1}
	p.cur = r
	for _, m := range p.events {
		clear(m)
	}
	p.mu.Unlock()
	return func() {
		now := time.Now()
		p.mu.Lock()
		r.answered = now
		p.mu.Unlock()
	}
}

func (p *handoffProbe) deleted(i int, key string) {
	now := time.Now()
	p.mu.Lock()
	if _, ok := p.events[i][key]; !ok {
		p.events[i][key] = now
	}
	p.mu.Unlock()
}

func (p *handoffProbe) granted(i int) {
	now := time.Now()
	p.mu.Lock()
	if r := p.cur; r != nil && r.next < 0 {
		r.next, r.granted, r.event = i, now, p.events[i][r.key]
		p.done = append(p.done, r)
	}
	p.mu.Unlock()
}

// dialOptions returns the interceptors of locker i's connection.
func (p *handoffProbe) dialOptions(i int) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var key []byte
			switch r := req.(type) {
			case *pb.TxnRequest:
				for _, op := range r.Success {
					if d := op.GetRequestDeleteRange(); d != nil {
						key = d.Key
					}
				}
			case *pb.DeleteRangeRequest:
				key = r.Key
			}
			if key == nil {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			done := p.released(string(key))
			err := invoker(ctx, method, req, reply, cc, opts...)
			done()
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &handoffStream{ClientStream: s, p: p, i: i}, nil
		}),
	}
}

type handoffStream struct {
	grpc.ClientStream
	p *handoffProbe
	i int
}

func (s *handoffStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); ok && err == nil {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				s.p.deleted(s.i, string(ev.Kv.Key))
			}
		}
	}
	return err
}

type handoffLocker = func(*testing.B, []grpc.DialOption) func(context.Context, string) (func(context.Context) error, error)

// handoffBreakdowns runs handoffBreakdown with 8 lockers (Contended) and
// 64 (Contended64).
func handoffBreakdowns(b *testing.B, newLocker handoffLocker) {
	for _, n := range []int{8, 64} {
		name := "Contended"
		if n != 8 {
			name += strconv.Itoa(n)
		}
		b.Run(name, func(b *testing.B) { handoffBreakdown(b, n, newLocker) })
	}
}

func handoffBreakdown(b *testing.B, n int, newLocker handoffLocker) {
	p := &handoffProbe{events: make([]map[string]time.Time, n)}
	locks := make([]func(context.Context, string) (func(context.Context) error, error), n)
	for i := range locks {
		p.events[i] = make(map[string]time.Time)
		locks[i] = newLocker(b, p.dialOptions(i))
	}
	name := "handoff/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		left    = b.N + n
		failure error
	)
	b.ResetTimer()
	for i := range locks {
		wg.Go(func() {
			for {
				mu.Lock()
				if left == 0 || failure != nil {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				unlock, err := locks[i](ctx, name)
				if err != nil {
					mu.Lock()
					failure = err
					mu.Unlock()
					return
				}
				p.granted(i)
				for t0 := time.Now(); time.Since(t0) < 100*time.Microsecond; {
				}
				if err := unlock(ctx); err != nil {
					mu.Lock()
					failure = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if failure != nil {
		b.Fatal(failure)
	}
	var release, event, grant, handoff []time.Duration
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.done {
		handoff = append(handoff, r.granted.Sub(r.sent))
		if !r.answered.IsZero() {
			release = append(release, r.answered.Sub(r.sent))
		}
		if !r.event.IsZero() {
			event = append(event, r.event.Sub(r.sent))
			grant = append(grant, r.granted.Sub(r.event))
		}
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"release", release}, {"event", event}, {"grant", grant}, {"handoff", handoff}} {
		if len(m.ds) == 0 {
			continue
		}
		slices.Sort(m.ds)
		b.ReportMetric(float64(m.ds[len(m.ds)/2].Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(m.ds[len(m.ds)*99/100].Microseconds()), m.name+"-p99-µs")
	}
}
