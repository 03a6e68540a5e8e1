package zookeeper_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/zookeeper"
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
