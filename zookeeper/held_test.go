package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
	"github.com/go-zookeeper/zk"
)

// BenchmarkHeld runs the Held workload (dlocktest.BenchHeld) on one
// backend against a ZooKeeper server started for it: what the backend
// keeps per held lease. With DLOCK_BENCH_HELD_HEAPPROFILE=FILE it writes a
// heap profile while holding:
//
//	DLOCK_BENCH_HELD_HEAPPROFILE=/tmp/held go test -run XXX -bench Held -benchtime 1x -memprofilerate 512 ./zookeeper/
//	go tool pprof -sample_index=inuse_space -top /tmp/held.10000
func BenchmarkHeld(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	dlocktest.BenchHeld(b, func(t testing.TB) dlock.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		be, err := zookeeper.Open(ctx, srv.Addr(), zookeeper.Root("/held"))
		if err != nil {
			t.Fatal(err)
		}
		return be
	}, dlocktest.HeldSizes(heldSizes()...))
}

// heldSizes returns the sizes of BenchmarkHeld: 10,000 leases, or those
// of DLOCK_BENCH_HELD_SIZES (a comma list).
func heldSizes() []int {
	s := os.Getenv("DLOCK_BENCH_HELD_SIZES")
	if s == "" {
		return []int{10000}
	}
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			panic(fmt.Sprintf("DLOCK_BENCH_HELD_SIZES=%q: want a comma list of positive numbers", s))
		}
		ns = append(ns, n)
	}
	return ns
}

// BenchmarkWatchBytes measures what go-zookeeper keeps per watch: a
// channel and a map entry. A watch per held node (the backend's design
// before the recursive watch, see Backend.RenewBatch) cost that much per
// held lease. It creates
// 10,000 nodes, leaves a watch on each with ExistsW, and reports the heap
// allocated (after a GC) per watch.
//
//	go test -run XXX -bench WatchBytes -benchtime 1x ./zookeeper/
func BenchmarkWatchBytes(b *testing.B) {
	const n = 10000
	srv := testserver.ZooKeeper(b)
	be := connect(b, []string{srv.Addr()}, zookeeper.Root("/watchbytes"))
	conn := be.Conn()
	if _, err := conn.Create("/watchbytes", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		b.Fatal(err)
	}
	paths := make([]string, n)
	for i := 0; i < n; i += 1000 {
		ops := make([]any, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			paths[j] = "/watchbytes/" + strconv.Itoa(j)
			ops = append(ops, &zk.CreateRequest{Path: paths[j], Acl: zk.WorldACL(zk.PermAll)})
		}
		if _, err := conn.Multi(ops...); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	chans := make([]<-chan zk.Event, n)
	h1 := heap()
	for i, p := range paths {
		ok, _, ch, err := conn.ExistsW(p)
		if err != nil || !ok {
			b.Fatalf("ExistsW(%s) = %v, %v", p, ok, err)
		}
		chans[i] = ch
	}
	h2 := heap()
	b.ReportMetric(float64(int64(h2)-int64(h1))/n, "B/watch")
	runtime.KeepAlive(chans)
}
