package dlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// BenchmarkClientLockUnlock measures the Client's own cost of an
// uncontended Lock and Unlock over the mem backend, whose store operations
// are a map under a mutex: what is left is the root package's work.
//
//	go test -run XXX -bench ClientLockUnlock -benchmem
func BenchmarkClientLockUnlock(b *testing.B) {
	c, err := dlock.New(mem.New())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.Run("Uncontended", func(b *testing.B) {
		m := c.Mutex("bench/u")
		for b.Loop() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DistinctNames", func(b *testing.B) {
		var g atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			m := c.Mutex("bench/d/" + strconv.FormatInt(g.Add(1), 10))
			for pb.Next() {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
