package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/etcd"
	"github.com/dlock-dev/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkEtcdElection compares dlock's Election on the etcd backend with
// etcd's own concurrency.Election, on one etcd server (ETCD_ADDR, or one
// started for the run with etcd's default timeouts), every candidate and
// observer on its own connection. (The hand-over on Resign is
// BenchmarkEtcd's Election workload, which benchdoc runs.) Metrics, p50
// and p99 in µs:
//
//   - Proclaim: the leader publishes a new value; observe is from the
//     Proclaim call to the value's delivery to the observer, and
//     observe-after from the return of Proclaim (the change is in the
//     store by then) to the delivery (0 when it came first).
//   - Kill: the leader's connection goes through a proxy that freezes
//     (a crashed or partitioned leader: nothing is released, the lease
//     runs out); handover is from the freeze to the return of the waiting
//     candidate's Campaign. Both use a 1 s TTL, which etcd raises to its
//     minimum (1.5 × the election timeout: 2 s with the defaults).
//     Each iteration costs about that TTL, so give it few iterations.
//
// It is not one of BenchmarkEtcd's workloads (benchdoc does not run it).
//
//	cd bench && go test -run XXX -bench 'EtcdElection/.*/Proclaim' -benchtime 500x
//	cd bench && go test -run XXX -bench 'EtcdElection/.*/Kill' -benchtime 20x
func BenchmarkEtcdElection(b *testing.B) {
	addr := os.Getenv("ETCD_ADDR")
	if addr == "" {
		addr = testserver.Etcd(b).Addr()
	}
	endpoints := []string{"http://" + addr}
	for _, lib := range []electionLib{dlockElections{}, etcdElections{}} {
		b.Run(lib.String(), func(b *testing.B) {
			b.Run("Proclaim", func(b *testing.B) { electionProclaim(b, lib, endpoints) })
			b.Run("Kill", func(b *testing.B) { electionKill(b, lib, addr, endpoints) })
		})
	}
}

// electionLib makes candidates and observers of one library.
type electionLib interface {
	String() string
	// candidate returns a candidate of the election name on its own
	// connection to endpoints, with a 1 s TTL if short, and a close
	// function (which also runs at the end of the benchmark).
	candidate(b *testing.B, endpoints []string, name string, short bool) (candidate, func())
	// observe follows the leader's value of name on its own connection.
	observe(b *testing.B, ctx context.Context, endpoints []string, name string) <-chan string
	// keys is the key prefix of the election's candidates.
	keys(name string) string
}

type candidate interface {
	Campaign(ctx context.Context, value string) error
	Proclaim(ctx context.Context, value string) error
	Resign(ctx context.Context) error
}

type dlockElections struct{}

func (dlockElections) String() string { return "dlock" }

func (dlockElections) client(b *testing.B, endpoints []string, opts ...dlock.Option) *dlock.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := etcd.Open(ctx, strings.Join(endpoints, ","), etcd.Prefix("dlockbench"), etcd.ConnectTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	c, err := dlock.New(be, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func (l dlockElections) candidate(b *testing.B, endpoints []string, name string, short bool) (candidate, func()) {
	var opts []dlock.Option
	if short {
		opts = append(opts, dlock.TTL(time.Second))
	}
	c := l.client(b, endpoints, opts...)
	var once sync.Once
	done := func() { once.Do(func() { c.Close() }) }
	b.Cleanup(done)
	return &dlockCandidate{e: c.Election(name)}, done
}

type dlockCandidate struct{ e *dlock.Election }

func (d *dlockCandidate) Campaign(ctx context.Context, value string) error {
	_, err := d.e.Campaign(ctx, value)
	return err
}
func (d *dlockCandidate) Proclaim(ctx context.Context, value string) error {
	return d.e.Proclaim(ctx, value)
}
func (d *dlockCandidate) Resign(ctx context.Context) error { return d.e.Resign(ctx) }

func (l dlockElections) observe(b *testing.B, ctx context.Context, endpoints []string, name string) <-chan string {
	c := l.client(b, endpoints)
	b.Cleanup(func() { c.Close() })
	out := make(chan string, 1024)
	lds := c.Election(name).Observe(ctx)
	go func() {
		defer close(out)
		for ld := range lds {
			if ld.Err == nil {
				out <- ld.Value
			}
		}
	}()
	return out
}

func (dlockElections) keys(name string) string { return "dlockbench/" + name + "/" }

// etcdElections makes etcd's concurrency.Election candidates and
// observers, their requests counted by ct if set.
type etcdElections struct{ ct *etcdCounter }

func (etcdElections) String() string { return "concurrency.Election" }

func (l etcdElections) session(b *testing.B, endpoints []string, ttl int) (*clientv3.Client, *concurrency.Session) {
	ct := l.ct
	if ct == nil {
		ct = &etcdCounter{}
	}
	cli, err := clientv3.New(etcdConfig(endpoints, ct))
	if err != nil {
		b.Fatal(err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		cli.Close()
		b.Fatal(err)
	}
	return cli, s
}

func (l etcdElections) candidate(b *testing.B, endpoints []string, name string, short bool) (candidate, func()) {
	ttl := 30
	if short {
		ttl = 1
	}
	cli, s := l.session(b, endpoints, ttl)
	var once sync.Once
	done := func() {
		once.Do(func() {
			s.Orphan() // a killed leader's lease is gone; revoking it would hang
			cli.Close()
		})
	}
	b.Cleanup(done)
	return concurrency.NewElection(s, l.keys(name)), done
}

func (l etcdElections) observe(b *testing.B, ctx context.Context, endpoints []string, name string) <-chan string {
	cli, s := l.session(b, endpoints, 30)
	b.Cleanup(func() {
		s.Close()
		cli.Close()
	})
	out := make(chan string, 1024)
	rs := concurrency.NewElection(s, l.keys(name)).Observe(ctx)
	go func() {
		defer close(out)
		for r := range rs {
			if len(r.Kvs) > 0 {
				out <- string(r.Kvs[0].Value)
			}
		}
	}()
	return out
}

func (etcdElections) keys(name string) string { return "/etcdelection/" + name + "/" }

// queued waits until the election has n candidate keys.
func queued(b *testing.B, cli *clientv3.Client, prefix string, n int64) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if r.Count >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never had %d keys", prefix, n)
		}
	}
}

func rawClient(b *testing.B, endpoints []string) *clientv3.Client {
	cli, err := clientv3.New(etcdConfig(endpoints, &etcdCounter{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

func electionName(kind string) string {
	return fmt.Sprintf("election-%s-%x", kind, time.Now().UnixNano())
}

// campaignAsync starts c's campaign for value; its result comes on the
// channel, with the time Campaign returned.
func campaignAsync(c candidate, value string) <-chan campaignResult {
	res := make(chan campaignResult, 1)
	go func() {
		err := c.Campaign(context.Background(), value)
		res <- campaignResult{time.Now(), err}
	}()
	return res
}

type campaignResult struct {
	at  time.Time
	err error
}

func electionProclaim(b *testing.B, lib electionLib, endpoints []string) {
	name := electionName("proclaim")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := dlocktest.WatchDeliveries(lib.observe(b, ctx, endpoints, name))
	c, _ := lib.candidate(b, endpoints, name, false)
	if err := c.Campaign(ctx, "p0"); err != nil {
		b.Fatal(err)
	}
	obs.Wait(b, "p0")
	var seen, after []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		v := fmt.Sprint("p", i)
		start := time.Now()
		if err := c.Proclaim(ctx, v); err != nil {
			b.Fatal(err)
		}
		done := time.Now()
		at := obs.Wait(b, v)
		seen = append(seen, at.Sub(start))
		after = append(after, max(at.Sub(done), 0))
	}
	b.StopTimer()
	dlocktest.ReportLatencies(b, "observe-", seen)
	dlocktest.ReportLatencies(b, "observe-after-", after)
	b.ReportMetric(0, "ns/op")
}

func electionKill(b *testing.B, lib electionLib, addr string, endpoints []string) {
	name := electionName("kill")
	raw := rawClient(b, endpoints)
	ctx := context.Background()
	next, _ := lib.candidate(b, endpoints, name, true)
	if err := next.Campaign(ctx, "k0"); err != nil {
		b.Fatal(err)
	}
	var hand []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		// A doomed leader behind a proxy: the waiting candidate resigns
		// once the doomed one is queued, so the doomed one leads.
		b.StopTimer()
		p := testserver.NewProxy(b, addr)
		doomed, closeDoomed := lib.candidate(b, []string{"http://" + p.Addr()}, name, true)
		res := campaignAsync(doomed, fmt.Sprint("doomed", i))
		queued(b, raw, lib.keys(name), 2)
		if err := next.Resign(ctx); err != nil {
			b.Fatal(err)
		}
		if r := <-res; r.err != nil {
			b.Fatal(r.err)
		}
		res = campaignAsync(next, fmt.Sprint("k", i))
		queued(b, raw, lib.keys(name), 2)
		b.StartTimer()
		start := time.Now()
		p.Freeze()
		r := <-res
		if r.err != nil {
			b.Fatal(r.err)
		}
		hand = append(hand, r.at.Sub(start))
		b.StopTimer()
		p.Heal()
		closeDoomed()
		b.StartTimer()
	}
	b.StopTimer()
	dlocktest.ReportLatencies(b, "handover-", hand)
	b.ReportMetric(0, "ns/op")
}

// etcdElectorate runs dlocktest's election workload on etcd's
// concurrency.Election: each candidate and the observer with its own
// connection and Session (TTL 30 s), their requests counted; a candidate
// is queued once its key is under the election's prefix.
type etcdElectorate struct {
	etcdElections
	endpoints []string
	raw       *clientv3.Client
}

func (e *etcdElectorate) Candidate(b *testing.B, name string) dlocktest.Candidate {
	c, _ := e.candidate(b, e.endpoints, name, false)
	return c
}

func (e *etcdElectorate) Observe(b *testing.B, ctx context.Context, name string) <-chan string {
	return e.observe(b, ctx, e.endpoints, name)
}

func (e *etcdElectorate) Queued(b *testing.B, name string, _ dlocktest.Candidate) {
	queued(b, e.raw, e.keys(name), 2)
}
