package bench

import (
	"context"
	"sync"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"golang.org/x/sync/semaphore"
)

// weighted runs the weighted kinds' workloads (Semaphore4x16 and RW90,
// see dlocktest.BenchWeighted) and the election workload (Election, see
// dlocktest.BenchElections) on dlock Clients over backends made by
// newBackend, one per contender; store counts the requests all of them
// sent to the store so far (store-req/grant, store-req/handover).
//
//	cd bench && go test -run XXX -bench '/dlock/(Semaphore4x16|RW90|Election)$' -benchtime 2000x
func weighted(b *testing.B, newBackend dlocktest.Factory, store func() int64) {
	dlocktest.BenchWeighted(b, newBackend, dlocktest.StoreRequests(store))
	dlocktest.BenchElections(b, newBackend, dlocktest.StoreRequests(store))
}

// benchEtcdRecipe runs RW90 on etcd's recipes RWMutex
// (go.etcd.io/etcd/client/v3/experimental/recipes), each contender with
// its own connection and Session (TTL 30 s), a new RWMutex on
// /etcdrw/NAME for every lock; store-req/grant counts the gRPC requests of
// all of them as for dlock. Its RLock and Lock take no context: a waiter
// cannot give up, so the benchmark relies on every holder unlocking.
func benchEtcdRecipe(b *testing.B, endpoints []string) {
	ct := &etcdCounter{}
	dlocktest.BenchRWLockers(b, func(b *testing.B) dlocktest.RWLocker {
		return etcdRecipeLocker{newEtcdSession(b, etcdConfig(endpoints, ct))}
	}, dlocktest.StoreRequests(ct.reqs.Load))
}

type etcdRecipeLocker struct{ s *concurrency.Session }

func (l etcdRecipeLocker) RLock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := recipe.NewRWMutex(l.s, "/etcdrw/"+name)
	if err := m.RLock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.RUnlock() }, nil
}

func (l etcdRecipeLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := recipe.NewRWMutex(l.s, "/etcdrw/"+name)
	if err := m.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.Unlock() }, nil
}

// BenchmarkInProcess is the ceiling of the weighted workloads: the same
// workloads on locks of one process, with no store and no network —
// golang.org/x/sync's semaphore.Weighted (strict FIFO, as dlock's
// semaphores) for Semaphore4x16 and sync.RWMutex for RW90, the 16
// contenders sharing one lock per name.
//
//	cd bench && go test -run XXX -bench InProcess -benchtime 20000x
func BenchmarkInProcess(b *testing.B) {
	b.Run("semaphore.Weighted", func(b *testing.B) {
		var sems sync.Map // name -> *semaphore.Weighted
		dlocktest.BenchSemaphores(b, func(*testing.B) dlocktest.Semaphorer { return weightedSemaphorer{&sems} })
	})
	b.Run("sync.RWMutex", func(b *testing.B) {
		var rws sync.Map // name -> *sync.RWMutex
		dlocktest.BenchRWLockers(b, func(*testing.B) dlocktest.RWLocker { return syncRWLocker{&rws} })
	})
}

type weightedSemaphorer struct{ m *sync.Map }

func (s weightedSemaphorer) Acquire(ctx context.Context, name string, limit int) (func(context.Context) error, error) {
	v, _ := s.m.LoadOrStore(name, semaphore.NewWeighted(int64(limit)))
	sem := v.(*semaphore.Weighted)
	if err := sem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return func(context.Context) error { sem.Release(1); return nil }, nil
}

type syncRWLocker struct{ m *sync.Map }

func (l syncRWLocker) rw(name string) *sync.RWMutex {
	v, _ := l.m.LoadOrStore(name, new(sync.RWMutex))
	return v.(*sync.RWMutex)
}

func (l syncRWLocker) RLock(ctx context.Context, name string) (func(context.Context) error, error) {
	rw := l.rw(name)
	rw.RLock()
	return func(context.Context) error { rw.RUnlock(); return nil }, nil
}

func (l syncRWLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	rw := l.rw(name)
	rw.Lock()
	return func(context.Context) error { rw.Unlock(); return nil }, nil
}
