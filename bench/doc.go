// Package bench compares dlock with other lock libraries on the same
// workloads (dlocktest.BenchLockers), in the same process, against the same
// servers. It is a module of its own so that the library's go.mod never
// lists the libraries it is compared with.
//
// Run it with, for example:
//
//	cd bench && go test -run XXX -bench . -benchtime 2000x
//
// # Semaphores, read-write locks and elections
//
// dlock's backends that keep them (all but Redlock; PostgreSQL and MariaDB
// in session mode keep only what their advisory locks can) also run
// Semaphore4x16, a semaphore of 4 with 16 contenders, and RW90, a
// read-write lock with one write in ten among 16 contenders (see
// weighted_test.go), with store-req/grant, and Election, leadership handed
// between two candidates with an observer on a third connection
// (dlocktest.BenchElections: handover and observe latency,
// store-req/handover). The Go peers that have these primitives run them
// beside dlock: etcd's recipes RWMutex (Etcd/recipe.RWMutex/RW90) and
// concurrency.Election (Etcd/concurrency.Election/Election);
// BenchmarkInProcess runs the ceiling, x/sync's semaphore.Weighted and
// sync.RWMutex in one process:
//
//	cd bench && go test -run XXX -bench '(Redis|Etcd|ZooKeeper|InProcess)/.*/(Semaphore4x16|RW90|Election)$' -benchtime 2000x
//
// # Scale
//
// Every dlock backend also runs the scale workloads of package dlocktest
// (see scale_test.go): Herd, 10, 100 and 1,000 waiters on one name over 10
// Clients (store requests per release, release-to-next-grant p50/p99), and
// Held, 10,000 and 100,000 leases held at once by one Client (heap per
// lease, goroutines, renewal requests per second, leases lost). The store
// requests are counted in each driver: Redis commands, etcd gRPC requests
// and stream messages, ZooKeeper requests, SQL statements. Held ignores
// b.N; its TTL is 3 s per 10,000 leases (3 s and 30 s, see
// dlocktest.HeldTTL) unless DLOCK_BENCH_HELD_TTL sets one:
//
//	cd bench && go test -run XXX -bench 'Redis/dlock/Held' -benchtime 1x
//	cd bench && DLOCK_BENCH_HELD_TTL=30s go test -run XXX -bench 'Postgres/dlock/Held/10000$' -benchtime 1x
//	cd bench && go test -run XXX -bench 'Redis/.*/Herd' -benchtime 100x
//
// # docs/BENCHMARKS.md
//
// cmd/benchdoc runs these benchmarks (the timed workloads of every
// library, then dlock's Held), -runs times, and writes docs/BENCHMARKS.md
// from their medians, with the ratio to the best peer beside each figure,
// and its charts in docs/bench/ (the raw output too, in docs/bench/raw.txt):
//
//	cd bench && go run ./cmd/benchdoc -runs 3 -out ../docs
package bench
