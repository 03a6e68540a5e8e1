package bench

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

// BenchmarkZooKeeper runs the dlocktest workloads on dlock's zookeeper
// backend (default and Fair, which is the same queue) and on
// go-zookeeper's own zk.Lock (the recipe without sessions, tokens or
// reentrancy), in this process, against one ZooKeeper server: the one at
// ZK_ADDR, or one started for the run. Every locker has its own
// connection, so its own session.
//
// Besides the workloads' metrics, every sub-benchmark reports reqs/grant
// (requests sent to ZooKeeper per lock granted, pings and connection
// set-up left out) and events/grant (watch notifications received per
// grant), and a Requests sub-benchmark measures, lock by lock, the
// requests of one uncontended acquire (reqs/acquire) and of one release
// (reqs/release). dlock and dlock-fair also run the Herd workload, and
// dlock the Held workload (see [scale]) and the weighted kinds'
// (Semaphore4x16, RW90: see [weighted]; go-zookeeper has neither); their
// store-req counts are the backends' Stats (requests sent, pings left
// out).
//
//	cd bench && go test -run XXX -bench ZooKeeper -benchtime 2000x
func BenchmarkZooKeeper(b *testing.B) {
	addr := os.Getenv("ZK_ADDR")
	if addr == "" {
		// Containers reaped at ZooKeeper's default interval (a minute),
		// not at the test servers' 500 ms.
		addr = testserver.ZooKeeper(b, testserver.WithJVMProperty("znode.container.checkIntervalMs", "60000")).Addr()
	}
	servers := []string{addr}
	for _, lib := range []struct {
		name      string
		newLocker func(b *testing.B) (dlocktest.Locker, func() traffic)
	}{
		{"dlock", func(b *testing.B) (dlocktest.Locker, func() traffic) { return newZKDlock(b, servers) }},
		{"dlock-fair", func(b *testing.B) (dlocktest.Locker, func() traffic) { return newZKDlock(b, servers, dlock.Fair()) }},
		{"zk.Lock", func(b *testing.B) (dlocktest.Locker, func() traffic) { return newZKLock(b, servers) }},
	} {
		b.Run(lib.name, func(b *testing.B) {
			b.Run("Requests", func(b *testing.B) {
				l, count := lib.newLocker(b)
				zkRequests(b, l, count, "dlockbench/requests")
			})
			dlocktest.BenchLockers(b, zkCounting(lib.newLocker))
			if lib.name == "zk.Lock" {
				return
			}
			var opts []dlock.Option
			if lib.name == "dlock-fair" {
				opts = append(opts, dlock.Fair())
			}
			var (
				mu  sync.Mutex
				bes []*zookeeper.Backend
			)
			newBackend := func(t testing.TB) dlock.Backend {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				be, err := zookeeper.Open(ctx, strings.Join(servers, ","), zookeeper.Root("/dlockbench"))
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				bes = append(bes, be)
				mu.Unlock()
				return be
			}
			store := func() int64 {
				mu.Lock()
				defer mu.Unlock()
				var n int64
				for _, be := range bes {
					n += be.Stats().Total()
				}
				return n
			}
			scale(b, lib.name == "dlock", opts, newBackend, store)
			if lib.name == "dlock" { // weighted waiters queue in order with or without Fair
				weighted(b, newBackend, store)
			}
		})
	}
}

// traffic is what a locker sent and received so far.
type traffic struct{ reqs, events int64 }

// newZKDlock returns a dlock Client on its own zookeeper backend.
func newZKDlock(b *testing.B, servers []string, opts ...dlock.Option) (dlocktest.Locker, func() traffic) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := zookeeper.Open(ctx, strings.Join(servers, ","), zookeeper.Root("/dlockbench"))
	if err != nil {
		b.Fatal(err)
	}
	c, err := dlock.New(be, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return zkDlockLocker{c}, func() traffic {
		s := be.Stats()
		return traffic{s.Total(), s.WatchEvents}
	}
}

type zkDlockLocker struct{ c *dlock.Client }

func (l zkDlockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lease, err := l.c.Mutex(name).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// newZKLock returns go-zookeeper's zk.Lock on its own connection, with a
// dialer that counts the requests.
func newZKLock(b *testing.B, servers []string) (dlocktest.Locker, func() traffic) {
	ct := &zkCounter{}
	conn, events, err := zk.Connect(servers, 30*time.Second, zk.WithDialer(ct.dial), zk.WithLogInfo(false), zk.WithLogger(quietLogger{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		for range events {
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for conn.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			b.Fatal("zk.Connect: no session after 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return zkLockLocker{conn}, func() traffic { return traffic{ct.reqs.Load(), ct.events.Load()} }
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// zkLockLocker is zk.Lock with its defaults: a new zk.Lock on
// /zklock/NAME for every acquisition (a zk.Lock is not reentrant and holds
// one acquisition at a time), world ACL, no data in the node.
type zkLockLocker struct{ conn *zk.Conn }

func (l zkLockLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lk := zk.NewLock(l.conn, "/zklock/"+name, zk.WorldACL(zk.PermAll))
	if err := lk.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return lk.Unlock() }, nil
}

// zkRequests locks and unlocks one name b.N times and reports the requests
// of each acquire and each release.
func zkRequests(b *testing.B, l dlocktest.Locker, count func() traffic, name string) {
	ctx := context.Background()
	// The first round creates the parent nodes.
	unlock, err := l.Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	if err := unlock(ctx); err != nil {
		b.Fatal(err)
	}
	var acq, rel int64
	b.ResetTimer()
	for range b.N {
		t0 := count()
		unlock, err := l.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		t1 := count()
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := count()
		acq += t1.reqs - t0.reqs
		rel += t2.reqs - t1.reqs
	}
	b.StopTimer()
	b.ReportMetric(float64(acq)/float64(b.N), "reqs/acquire")
	b.ReportMetric(float64(rel)/float64(b.N), "reqs/release")
}

// zkCounting wraps a locker factory so that each sub-benchmark reports the
// requests and watch notifications per grant of all the lockers it made.
func zkCounting(newLocker func(*testing.B) (dlocktest.Locker, func() traffic)) func(*testing.B) dlocktest.Locker {
	type state struct {
		mu     sync.Mutex
		counts []func() traffic
		starts []traffic
		grants atomic.Int64
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
				var sum traffic
				for i, c := range st.counts {
					t := c()
					sum.reqs += t.reqs - st.starts[i].reqs
					sum.events += t.events - st.starts[i].events
				}
				b.ReportMetric(float64(sum.reqs)/float64(g), "reqs/grant")
				b.ReportMetric(float64(sum.events)/float64(g), "events/grant")
			})
		}
		l, count := newLocker(b)
		st.mu.Lock()
		st.counts = append(st.counts, count)
		st.starts = append(st.starts, count())
		st.mu.Unlock()
		return zkCountingLocker{l, &st.grants}
	}
}

type zkCountingLocker struct {
	dlocktest.Locker
	grants *atomic.Int64
}

func (l zkCountingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, err := l.Locker.Lock(ctx, name)
	if err == nil {
		l.grants.Add(1)
	}
	return unlock, err
}

// zkCounter counts the requests (pings and the connect request left out)
// that go-zookeeper writes and the watch notifications it reads.
type zkCounter struct{ reqs, events atomic.Int64 }

func (c *zkCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &zkCountingConn{Conn: conn, c: c}, nil
}

type zkCountingConn struct {
	net.Conn
	c       *zkCounter
	out, in zkFrames
}

func (z *zkCountingConn) Write(p []byte) (int, error) {
	z.out.feed(p, func(head []byte, first bool) {
		// head: xid, opcode; xid -2 is a ping.
		if !first && len(head) >= 8 && int32(binary.BigEndian.Uint32(head)) != -2 {
			z.c.reqs.Add(1)
		}
	})
	return z.Conn.Write(p)
}

func (z *zkCountingConn) Read(p []byte) (int, error) {
	n, err := z.Conn.Read(p)
	z.in.feed(p[:n], func(head []byte, first bool) {
		// head: xid; -1 is a watch notification.
		if !first && len(head) >= 4 && int32(binary.BigEndian.Uint32(head)) == -1 {
			z.c.events.Add(1)
		}
	})
	return n, err
}

// zkFrames splits a stream of length-prefixed frames, handing each frame's
// first 8 bytes to a function (Write and Read each have their own).
type zkFrames struct {
	buf        [12]byte
	have, want int
	rest, skip int
	seen       bool
}

func (f *zkFrames) feed(p []byte, frame func(head []byte, first bool)) {
	for len(p) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(p))
			f.skip -= k
			p = p[k:]
			continue
		}
		if f.have < 4 {
			k := copy(f.buf[f.have:4], p)
			f.have += k
			p = p[k:]
			if f.have < 4 {
				return
			}
			n := max(int(int32(binary.BigEndian.Uint32(f.buf[:4]))), 0)
			f.want = min(n, 8)
			f.rest = n - f.want
		}
		if f.have < 4+f.want {
			k := copy(f.buf[f.have:4+f.want], p)
			f.have += k
			p = p[k:]
			if f.have < 4+f.want {
				return
			}
		}
		frame(f.buf[4:4+f.want], !f.seen)
		f.seen = true
		f.have, f.skip = 0, f.rest
	}
}
