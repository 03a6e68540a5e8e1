package bench

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// scale runs the dlocktest scale workloads as sub-benchmarks of b: Herd
// (10, 100 and 1,000 waiters on one name over 10 Clients, with the Client
// options opts) and, if held, Held (10,000 and 100,000 leases of one
// Client, TTL 3 s per 10,000 leases, held for 4 TTL/3). newBackend makes the backend of each
// Client; store counts the requests all of them sent to the store so far.
// bopts override the sizes; DLOCK_BENCH_HELD_TTL (a Go duration) overrides
// Held's TTL. Select them with, for example:
//
//	cd bench && go test -run XXX -bench 'Redis/dlock/Held' -benchtime 1x
//	cd bench && DLOCK_BENCH_HELD_TTL=30s go test -run XXX -bench 'Redis/dlock/Held/100000' -benchtime 1x
//	cd bench && go test -run XXX -bench 'Redis/dlock/Herd' -benchtime 200x
func scale(b *testing.B, held bool, opts []dlock.Option, newBackend dlocktest.Factory, store func() int64, bopts ...dlocktest.BenchOption) {
	bopts = append([]dlocktest.BenchOption{dlocktest.StoreRequests(store)}, bopts...)

	b.Run("Herd", func(b *testing.B) { dlocktest.BenchHerd(b, newBackend, opts, bopts...) })
	if held {
		b.Run("Held", func(b *testing.B) { dlocktest.BenchHeld(b, newBackend, bopts...) })
	}
}
