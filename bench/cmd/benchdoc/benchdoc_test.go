package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// out is go test -bench output of two runs, with a failure.
const out = `goos: linux
BenchmarkRedis/dlock/Uncontended-2         	    1000	    100000 ns/op	 10000 ops/s	 80 p50-µs	 400 p99-µs
BenchmarkRedis/redsync/Uncontended-2       	    1000	    200000 ns/op	  5000 ops/s	 150 p50-µs	 300 p99-µs
BenchmarkRedis/redislock/Uncontended-2     	    1000	    250000 ns/op	  4000 ops/s	 90 p50-µs	 900 p99-µs
BenchmarkRedis/floor/Uncontended-2         	    1000	     50000 ns/op
BenchmarkRedis/dlock/Herd/10-2             	     100	     10000 ns/op	  2.0 store-req/release	 500 handoff-p99-µs
BenchmarkRedis/dlock/Uncontended-2         	    1000	    100000 ns/op	 12000 ops/s	 70 p50-µs	 500 p99-µs
BenchmarkRedis/redsync/Uncontended-2       	    1000	    200000 ns/op	  6000 ops/s	 150 p50-µs	 300 p99-µs
BenchmarkRedis/redislock/Uncontended-2     	    1000	    250000 ns/op	  4000 ops/s	 90 p50-µs	 900 p99-µs
BenchmarkRedis/floor/Uncontended-2         	    1000	     50000 ns/op
BenchmarkRedis/dlock/Herd/10-2             	     100	     10000 ns/op	  4.0 store-req/release	 700 handoff-p99-µs
--- FAIL: BenchmarkRedis/dlock/Held/100000
BenchmarkEtcd/dlock/Requests-2             	     100	     10000 ns/op
BenchmarkEtcd/dlock/RW90-2                 	     100	     10000 ns/op	 400 grants/s	 9000 write-wait-p99-µs	 8 store-req/grant
BenchmarkEtcd/recipe.RWMutex/RW90-2        	     100	     10000 ns/op	 200 grants/s	 3000 write-wait-p99-µs	 4 store-req/grant
BenchmarkEtcd/dlock/Election-2             	     100	         0 ns/op	 900 handover-p50-µs	 7 store-req/handover
BenchmarkEtcd/concurrency.Election/Election-2 	 100	         0 ns/op	 90000 handover-p50-µs	 6 store-req/handover
BenchmarkPostgres/dlock-session/Fair/Uncontended-2 	     100	     10000 ns/op	 100 ops/s
BenchmarkPostgres/dlock/Default/Herd/10-2 	     100	     10000 ns/op	 3 store-req/release
--- FAIL: BenchmarkPostgres/dlock/Held
PASS
`

// TestDocument: the medians of the runs, the ratio to the best peer (the
// highest rate, the lowest latency; floor and dlock are not peers), the
// failures listed, and the charts drawn.
func TestDocument(t *testing.T) {
	rs := parse(out)
	if r := rs.get("Redis", "dlock", "Uncontended"); r == nil || r.runs != 2 || r.metrics["ops/s"] != 11000 || r.metrics["p99-µs"] != 450 {
		t.Fatalf("dlock Uncontended: %+v; want 2 runs, median 11000 ops/s, 450 p99-µs", r)
	}
	if r := rs.get("Redis", "floor", "Uncontended"); r == nil || r.metrics["ops/s"] != 20000 {
		t.Errorf("floor: %+v; want ops/s from ns/op, 20000", r)
	}
	if rs.get("Postgres", "dlock-session-fair", "Uncontended") == nil || rs.get("Postgres", "dlock", "Herd/10") == nil {
		t.Errorf("Default and Fair of dlocktest.Bench: %v", rs.in("Postgres"))
	}
	if rs.get("Etcd", "dlock", "Requests") == nil || !slices.Equal(rs.failed, []string{"Redis/dlock/Held/100000", "Postgres/dlock/Held"}) {
		t.Errorf("results %v, failed %q", rs.backends(), rs.failed)
	}
	dir := t.TempDir()
	charts, err := drawCharts(rs, dir)
	if err != nil || len(charts) != 3 { // p50, p99, herd
		t.Fatalf("charts %v, %v; want 3", charts, err)
	}
	for _, c := range charts {
		if fi, err := os.Stat(filepath.Join(dir, strings.TrimPrefix(c.file, "bench/"))); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", c.file, err)
		}
	}
	doc := document(config{runs: 2, heldRuns: 1, label: "test"}, rs, charts, []string{"Machine: test"}, 0)
	for _, want := range []string{
		"| workload | figure | dlock | redsync | redislock | floor |",
		"| Uncontended | ops/s | 11.0k (2.00) | 5500 (1.00) | 4000 (0.73) | 20.0k (3.64) |",
		"| Uncontended | p99-µs | 450 (1.50) | 300 (1.00) | 900 (3.00) | – |",
		"| Herd/10 | store-req/release | 3 | – | – | – |",
		"| RW90 | grants/s | 400 (2.00) | 200 (1.00) | – |",
		"| RW90 | write-wait-p99-µs | 9000 (3.00) | 3000 (1.00) | – |",
		"| Election | handover-p50-µs | 900 (0.01) | – | 90.0k (1.00) |",
		"| Election | store-req/handover | 7 (1.17) | – | 6 (1.00) |",
		"- Redis/dlock/Held/100000",
		"> **test**", "median of 2 runs (Held: of 1)", "- Machine: test", "![", "bench/herd.png",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q:\n%s", want, doc)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"-runs", "3", "-label", "it's loaded", "-held", ""})
	if want := `-runs 3 -label 'it'\''s loaded' -held ''`; got != want {
		t.Errorf("shellJoin = %s; want %s", got, want)
	}
}
