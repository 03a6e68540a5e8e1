package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/testserver"
	"github.com/dlock-dev/dlock/internal/workload"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkOpCost/etcd runs the Uncontended and DistinctNames workloads on
// dlock and on concurrency.Mutex, alternating the two libraries round by
// round against one etcd server started for the run, and reports per
// operation (a lock and its unlock): the wall time, the CPU time of this
// process (the client), the CPU time of the etcd process, and the gRPC
// requests sent, each the median of the rounds (DLOCK_BENCH_ROUNDS, 5
// unless set). Since the machine's load shifts from minute to minute, the
// CPU times and request counts, not the wall time, are what tells the two
// libraries apart; they are measured in the same minutes.
//
// ETCD_ADDR and ETCD_PID name a server started by hand instead (to
// profile it, say); DLOCK_BENCH_LIBS keeps only the libraries named (a
// comma list); DLOCK_BENCH_RAW adds raw request shapes (see rawCycle:
// "dlock,mutex,plain-delete,txn-delete"). Its name keeps it out of the
// patterns that select BenchmarkEtcd's workloads.
//
//	cd bench && go test -run XXX -bench OpCost/etcd -benchtime 1000x
func BenchmarkOpCost(b *testing.B) { b.Run("etcd", benchEtcdCost) }

func benchEtcdCost(b *testing.B) {
	var endpoints []string
	var pid int
	if addr := os.Getenv("ETCD_ADDR"); addr != "" {
		// A server started by hand (to profile it, say): ETCD_PID names it.
		endpoints = []string{"http://" + addr}
		if pid, _ = strconv.Atoi(os.Getenv("ETCD_PID")); pid == 0 {
			b.Skip("ETCD_ADDR without ETCD_PID")
		}
	} else {
		srv := testserver.Etcd(b)
		endpoints, pid = []string{"http://" + srv.Addr()}, srv.PID()
	}
	rounds := 5
	if s := os.Getenv("DLOCK_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	type lib struct {
		name      string
		newLocker func(b *testing.B) (dlocktest.Locker, *etcdCounter)
	}
	libs := []lib{
		{"dlock", func(b *testing.B) (dlocktest.Locker, *etcdCounter) { return newEtcdDlock(b, endpoints) }},
		{"concurrency.Mutex", func(b *testing.B) (dlocktest.Locker, *etcdCounter) { return newEtcdMutex(b, endpoints) }},
	}
	if os.Getenv("DLOCK_BENCH_RAW") != "" {
		for _, shape := range strings.Split(os.Getenv("DLOCK_BENCH_RAW"), ",") {
			libs = append(libs, lib{"raw-" + shape, func(b *testing.B) (dlocktest.Locker, *etcdCounter) { return newRawLocker(b, endpoints, shape) }})
		}
	}
	if only := os.Getenv("DLOCK_BENCH_LIBS"); only != "" {
		// Only these (to profile one library, say).
		libs = slices.DeleteFunc(libs, func(l lib) bool { return !slices.Contains(strings.Split(only, ","), l.name) })
	}
	for _, wl := range []string{"Uncontended", "DistinctNames"} {
		b.Run(wl, func(b *testing.B) {
			type cost struct{ wall, cli, srv, reqs []float64 }
			costs := make([]cost, len(libs))
			lockers := make([]dlocktest.Locker, len(libs))
			counters := make([]*etcdCounter, len(libs))
			for i, lib := range libs {
				lockers[i], counters[i] = lib.newLocker(b)
			}
			ctx := context.Background()
			for r := range rounds {
				for j := range libs {
					i := (j + r) % len(libs) // alternate which goes first
					prefix := fmt.Sprintf("dlockcost/%d/%d/", r, i)
					c0, s0, q0 := selfCPU(), procCPU(b, pid), counters[i].reqs.Load()
					t0 := time.Now()
					var err error
					if wl == "Uncontended" {
						_, err = workload.Uncontended(ctx, lockers[i], prefix+"u", workload.OpsSpan(b.N, nil))
					} else {
						_, err = workload.Distinct(ctx, lockers[i], prefix, 32, workload.OpsSpan(b.N, nil))
					}
					if err != nil {
						b.Fatal(err)
					}
					n := float64(b.N)
					costs[i].wall = append(costs[i].wall, float64(time.Since(t0).Microseconds())/n)
					costs[i].cli = append(costs[i].cli, float64((selfCPU()-c0).Microseconds())/n)
					costs[i].srv = append(costs[i].srv, float64((procCPU(b, pid)-s0).Microseconds())/n)
					costs[i].reqs = append(costs[i].reqs, float64(counters[i].reqs.Load()-q0)/n)
				}
			}
			for i, lib := range libs {
				c := costs[i]
				if b.N == 1 {
					break // the framework's probe
				}
				fmt.Fprintf(os.Stderr, "%s %-18s wall %7.1f µs/op  client CPU %6.1f µs/op  etcd CPU %6.1f µs/op  %.2f reqs/op  (walls %.0f)\n", b.Name(),
					lib.name, median(c.wall), median(c.cli), median(c.srv), median(c.reqs), c.wall)
				b.ReportMetric(median(c.cli), lib.name+"-cpu-µs/op")
				b.ReportMetric(median(c.srv), lib.name+"-etcd-µs/op")
			}
		})
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// selfCPU is the user and system CPU time of this process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user and system CPU time of process pid so far.
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)        // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)        // stime, field 15
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

type rawLocker struct {
	cli   *clientv3.Client
	shape string
	lease clientv3.LeaseID
}

func newRawLocker(b *testing.B, endpoints []string, shape string) (dlocktest.Locker, *etcdCounter) {
	ct := &etcdCounter{}
	cli, err := clientv3.New(etcdConfig(endpoints, ct))
	if err != nil {
		b.Fatal(err)
	}
	lr, err := cli.Grant(context.Background(), 3600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return rawLocker{cli, shape, lr.ID}, ct
}

func (l rawLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// rawCycle locks and unlocks; the unlock is a no-op.
	if err := rawCycle(ctx, l.cli, l.shape, name+"/", l.lease); err != nil {
		return nil, err
	}
	return func(context.Context) error { return nil }, nil
}
