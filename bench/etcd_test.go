package bench

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// BenchmarkEtcd runs the dlocktest workloads on dlock's etcd backend and on
// etcd's own concurrency.Mutex (one Session per locker, as its docs
// suggest), in this process, against one etcd server: the one at
// ETCD_ADDR, or one started for the run with etcd's default timeouts.
// Every locker has its own connection (and, for concurrency.Mutex, its own
// session lease). Both use a 30 s TTL.
//
// Besides the workloads' metrics, every sub-benchmark reports reqs/grant
// (gRPC requests sent to etcd per lock granted: unary calls and messages on
// keep-alive and watch streams, lease keep-alives of sessions included)
// and events/grant (watch responses with events received per grant), and a
// Requests sub-benchmark measures, lock by lock, the requests of one
// uncontended acquire (reqs/acquire) and of one release (reqs/release; for
// dlock that includes the revocation of the hold's lease, which is sent in
// the background after the key is deleted). dlock also runs the Herd and
// Held workloads (see [scale]); their store-req counts are reqs as above.
// dlock also runs the weighted kinds' workloads (Semaphore4x16 and RW90,
// see [weighted]), and etcd's recipes RWMutex runs RW90 beside it
// (recipe.RWMutex/RW90: etcd has no semaphore), and the election workload
// (Election, see dlocktest.BenchElectorate) beside etcd's
// concurrency.Election (concurrency.Election/Election).
//
//	cd bench && go test -run XXX -bench Etcd -benchtime 2000x
func BenchmarkEtcd(b *testing.B) {
	addr := os.Getenv("ETCD_ADDR")
	if addr == "" {
		addr = testserver.Etcd(b).Addr()
	}
	endpoints := []string{"http://" + addr}
	for _, lib := range []struct {
		name      string
		newLocker func(b *testing.B) (dlocktest.Locker, *etcdCounter)
	}{
		{"dlock", func(b *testing.B) (dlocktest.Locker, *etcdCounter) { return newEtcdDlock(b, endpoints) }},
		{"concurrency.Mutex", func(b *testing.B) (dlocktest.Locker, *etcdCounter) { return newEtcdMutex(b, endpoints) }},
	} {
		b.Run(lib.name, func(b *testing.B) {
			b.Run("Requests", func(b *testing.B) {
				l, ct := lib.newLocker(b)
				etcdRequests(b, l, ct, "dlockbench/requests")
			})
			dlocktest.BenchLockers(b, etcdCounting(lib.newLocker))
			if lib.name != "dlock" {
				return
			}
			ct := &etcdCounter{}
			newBackend := func(t testing.TB) dlock.Backend {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				be, err := etcd.Open(ctx, strings.Join(endpoints, ","), etcd.Prefix("dlockbench"),
					etcd.ConnectTimeout(10*time.Second), etcd.DialOptions(ct.dialOptions()...))
				if err != nil {
					t.Fatal(err)
				}
				return be
			}
			scale(b, true, nil, newBackend, ct.reqs.Load)
			weighted(b, newBackend, ct.reqs.Load)
		})
	}
	b.Run("recipe.RWMutex", func(b *testing.B) { benchEtcdRecipe(b, endpoints) })
	b.Run("concurrency.Election", func(b *testing.B) {
		ct := &etcdCounter{}
		dlocktest.BenchElectorate(b, &etcdElectorate{etcdElections{ct}, endpoints, rawClient(b, endpoints)}, dlocktest.StoreRequests(ct.reqs.Load))
	})
}

// etcdCounter counts the gRPC requests a client sends and the watch
// responses with events it receives, with client interceptors.
type etcdCounter struct {
	reqs, revokes, events atomic.Int64
}

func (c *etcdCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.reqs.Add(1)
			if strings.HasSuffix(method, "/LeaseRevoke") {
				c.revokes.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countingStream{ClientStream: s, c: c}, nil
		}),
	}
}

type countingStream struct {
	grpc.ClientStream
	c *etcdCounter
}

func (s *countingStream) SendMsg(m any) error {
	s.c.reqs.Add(1)
	return s.ClientStream.SendMsg(m)
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); ok && err == nil && len(wr.Events) > 0 {
		s.c.events.Add(1)
	}
	return err
}

func etcdConfig(endpoints []string, ct *etcdCounter) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: ct.dialOptions(),
	}
}

// newEtcdDlock returns a dlock Client on its own etcd backend, whose
// connection also gets the dial options extra.
func newEtcdDlock(b *testing.B, endpoints []string, extra ...grpc.DialOption) (etcdDlockLocker, *etcdCounter) {
	ct := &etcdCounter{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := etcd.Open(ctx, strings.Join(endpoints, ","), etcd.Prefix("dlockbench"),
		etcd.ConnectTimeout(10*time.Second), etcd.DialOptions(append(ct.dialOptions(), extra...)...))
	if err != nil {
		b.Fatal(err)
	}
	c, err := dlock.New(be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return etcdDlockLocker{c}, ct
}

type etcdDlockLocker struct{ c *dlock.Client }

func (l etcdDlockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// newEtcdMutex returns concurrency.Mutex on its own connection and
// session (TTL 30 s, kept alive by the session in the background), whose
// connection also gets the dial options extra.
func newEtcdMutex(b *testing.B, endpoints []string, extra ...grpc.DialOption) (etcdMutexLocker, *etcdCounter) {
	ct := &etcdCounter{}
	cfg := etcdConfig(endpoints, ct)
	cfg.DialOptions = append(cfg.DialOptions, extra...)
	return etcdMutexLocker{newEtcdSession(b, cfg)}, ct
}

// newEtcdSession returns a Session (TTL 30 s) on a connection of its own
// made with cfg; both are closed when b ends.
func newEtcdSession(b *testing.B, cfg clientv3.Config) *concurrency.Session {
	cli, err := clientv3.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		cli.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close()
		cli.Close()
	})
	return s
}

// etcdMutexLocker is concurrency.Mutex with its defaults: a new Mutex on
// /etcdmutex/NAME for every acquisition, all of a locker's on its one
// Session (which is why two goroutines of one locker must not lock the
// same name: they would share the key and both hold the lock).
type etcdMutexLocker struct{ s *concurrency.Session }

func (l etcdMutexLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(l.s, "/etcdmutex/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// etcdRequests locks and unlocks one name b.N times and reports the
// requests of each acquire and each release. Lease revocations, which
// dlock sends in the background after a release, count for the release.
func etcdRequests(b *testing.B, l dlocktest.Locker, ct *etcdCounter, name string) {
	ctx := context.Background()
	var acq, rel int64
	revokes0 := ct.revokes.Load()
	b.ResetTimer()
	for range b.N {
		r0, v0 := ct.reqs.Load(), ct.revokes.Load()
		unlock, err := l.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		r1, v1 := ct.reqs.Load(), ct.revokes.Load()
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
		r2, v2 := ct.reqs.Load(), ct.revokes.Load()
		acq += (r1 - r0) - (v1 - v0)
		rel += (r2 - r1) - (v2 - v1)
	}
	b.StopTimer()
	// Revocations still in flight belong to the last releases.
	deadline := time.Now().Add(5 * time.Second)
	var revokes int64
	for {
		revokes = ct.revokes.Load() - revokes0
		time.Sleep(20 * time.Millisecond)
		if ct.revokes.Load()-revokes0 == revokes || time.Now().After(deadline) {
			break
		}
	}
	b.ReportMetric(float64(acq)/float64(b.N), "reqs/acquire")
	b.ReportMetric(float64(rel+revokes)/float64(b.N), "reqs/release")
	b.ReportMetric(float64(revokes)/float64(b.N), "revokes/release")
}

// etcdCounting wraps a locker factory so that each sub-benchmark reports
// the requests and watch events per grant of all the lockers it made.
func etcdCounting(newLocker func(*testing.B) (dlocktest.Locker, *etcdCounter)) func(*testing.B) dlocktest.Locker {
	type state struct {
		mu       sync.Mutex
		counters []*etcdCounter
		starts   [][2]int64
		grants   atomic.Int64
	}
	states := make(map[*testing.B]*state)
	return func(b *testing.B) dlocktest.Locker {
		st := states[b]
		if st == nil {
			st = &state{}
			states[b] = st
			b.Cleanup(func() {
				delete(states, b)
				g := st.grants.Load()
				if g == 0 {
					return
				}
				var reqs, events int64
				for i, c := range st.counters {
					reqs += c.reqs.Load() - st.starts[i][0]
					events += c.events.Load() - st.starts[i][1]
				}
				b.ReportMetric(float64(reqs)/float64(g), "reqs/grant")
				b.ReportMetric(float64(events)/float64(g), "events/grant")
			})
		}
		l, ct := newLocker(b)
		st.mu.Lock()
		st.counters = append(st.counters, ct)
		st.starts = append(st.starts, [2]int64{ct.reqs.Load(), ct.events.Load()})
		st.mu.Unlock()
		return etcdCountingLocker{l, &st.grants}
	}
}

type etcdCountingLocker struct {
	dlocktest.Locker
	grants *atomic.Int64
}

func (l etcdCountingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, err := l.Locker.Lock(ctx, name)
	if err == nil {
		l.grants.Add(1)
	}
	return unlock, err
}
