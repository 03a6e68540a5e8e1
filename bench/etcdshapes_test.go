package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkEtcdShapes tells apart what a lock and unlock on etcd costs in
// store requests from what the lock library adds, at 1 goroutine and at 32
// on distinct names: the raw requests of dlock's etcd backend and of
// concurrency.Mutex, without any library (every shape is one write to
// acquire and one to release; they differ only in how), then the backend
// called directly (etcd.Backend Acquire and Release), then a dlock Client
// on it. The shapes:
//
//   - raw-dlock: put if the lock's prefix is empty (a transaction), then
//     delete if the key was not modified since (a transaction: a holder of
//     the same owner, in another process too, may have re-entered it).
//   - raw-txn-delete: the same put, then a transaction that deletes
//     without a comparison.
//   - raw-plain-delete: the same put, then a plain delete (dlock's release
//     without its guard).
//   - raw-mutex: concurrency.Mutex's requests: put if its own key is
//     absent, reading the holder (a transaction), then a plain delete.
//   - backend, client: dlock's etcd backend, and a dlock Client on it.
//
// All share one connection. Compare medians of several runs (-count): the
// machine's load shifts between sub-benchmarks. It is not one of
// BenchmarkEtcd's workloads (benchdoc does not run it).
//
//	cd bench && go test -run XXX -bench EtcdShapes -benchtime 300x -count 3
func BenchmarkEtcdShapes(b *testing.B) {
	addr := os.Getenv("ETCD_ADDR")
	if addr == "" {
		addr = testserver.Etcd(b).Addr()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	lr, err := cli.Grant(ctx, 3600) // outlives the run; revoked at the end
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Revoke(context.Background(), lr.ID)
	be, err := etcd.New(cli, etcd.Prefix("dlockshapes"))
	if err != nil {
		b.Fatal(err)
	}
	c, err := dlock.New(be)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prefix := "dlockshapes/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
	shapes := []struct {
		name  string
		cycle func(name string) error
	}{
		{"raw-dlock", func(name string) error { return rawCycle(ctx, cli, "dlock", name+"/", lr.ID) }},
		{"raw-txn-delete", func(name string) error { return rawCycle(ctx, cli, "txn-delete", name+"/", lr.ID) }},
		{"raw-plain-delete", func(name string) error { return rawCycle(ctx, cli, "plain-delete", name+"/", lr.ID) }},
		{"raw-mutex", func(name string) error { return rawCycle(ctx, cli, "mutex", name+"/", lr.ID) }},
		{"backend", func(name string) error {
			g, _, err := be.Acquire(ctx, dlock.Request{Name: name, Owner: "bench", TTL: dlock.DefaultTTL})
			if err != nil {
				return err
			}
			return be.Release(ctx, dlock.Hold{Name: name, Owner: "bench", Token: g.Token, Handle: g.Handle})
		}},
		{"client", func(name string) error {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}},
	}
	for _, g := range []int{1, 32} {
		for _, sh := range shapes {
			b.Run(fmt.Sprintf("%s/g%d", sh.name, g), func(b *testing.B) {
				var wg sync.WaitGroup
				n := max(b.N/g, 1)
				b.ResetTimer()
				start := time.Now()
				for i := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						name := prefix + sh.name + "/" + strconv.Itoa(i)
						for range n {
							if err := sh.cycle(name); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(n*g)/time.Since(start).Seconds(), "ops/s")
			})
		}
	}
}

// rawCycle makes one lock and unlock of the lock at prefix lp in the
// given raw shape (see BenchmarkEtcdShapes), with its key on lease.
func rawCycle(ctx context.Context, cli *clientv3.Client, shape, lp string, lease clientv3.LeaseID) error {
	key := lp + strconv.FormatInt(int64(lease), 16)
	put := clientv3.OpPut(key, `{"owner":"bench","holds":1}`, clientv3.WithLease(lease))
	first := clientv3.OpGet(lp, clientv3.WithFirstCreate()...)
	cond := clientv3.Compare(clientv3.CreateRevision(lp), "=", 0).WithPrefix()
	then := []clientv3.Op{put}
	if shape == "mutex" {
		cond = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		then = append(then, first)
	}
	tr, err := cli.Txn(ctx).If(cond).Then(then...).Else(first).Commit()
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return fmt.Errorf("%s: the lock at %s is held", shape, lp)
	}
	switch shape {
	case "dlock":
		_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", tr.Header.Revision)).
			Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	case "txn-delete":
		_, err = cli.Txn(ctx).Then(clientv3.OpDelete(key)).Commit()
	default:
		_, err = cli.Delete(ctx, key)
	}
	return err
}
