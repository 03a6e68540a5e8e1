package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Candidate is the least a library must offer to run the election
// workload: a campaign that returns once it leads, publishing value, and
// a resignation. Each Candidate stands for a process of its own.
type Candidate interface {
	Campaign(ctx context.Context, value string) error
	Resign(ctx context.Context) error
}

// Electorate makes the candidates and observers of one library for
// [BenchElectorate].
type Electorate interface {
	// Candidate returns a candidate of the election name on a
	// connection of its own.
	Candidate(b *testing.B, name string) Candidate
	// Observe delivers the leader's value of name each time it changes,
	// from a connection of its own, until ctx ends.
	Observe(b *testing.B, ctx context.Context, name string) <-chan string
	// Queued returns once c, whose Campaign was just called in another
	// goroutine, is queued on the store behind the leader.
	Queued(b *testing.B, name string, c Candidate)
}

// BenchElections runs the election workload ([BenchElectorate]) on dlock
// Clients over backends made by newBackend, each candidate and the
// observer a Client of its own; a backend that cannot hold elections
// skips it. With [StoreRequests] in bopts it also reports
// store-req/handover.
func BenchElections(b *testing.B, newBackend Factory, bopts ...BenchOption) {
	BenchElectorate(b, &dlockElectorate{newBackend: newBackend}, bopts...)
}

// BenchElectorate runs, as sub-benchmark Election, b.N hand-overs of
// leadership between two candidates of one election: while one leads,
// the other campaigns, and once it is queued the leader resigns. It
// reports, in µs, handover-p50/p99 (from the Resign call to the return of
// the other's Campaign) and observe-p50/p99 (from the Resign call to the
// delivery of the new leader's value to an observer on a third
// connection); with [StoreRequests] in bopts, store-req/handover (the
// requests of the whole round: the campaign, the resignation and the
// observer's reads).
func BenchElectorate(b *testing.B, e Electorate, bopts ...BenchOption) {
	requests := newBenchConfig(bopts).Requests
	b.Run("Election", func(b *testing.B) {
		name := "dlockbench/" + randHex(6) + "/election"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := WatchDeliveries(e.Observe(b, ctx, name))
		cs := [2]Candidate{e.Candidate(b, name), e.Candidate(b, name)}
		if err := cs[0].Campaign(ctx, "v0"); err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				b.Skip(err)
			}
			b.Fatal(err)
		}
		obs.Wait(b, "v0")
		hand := make([]time.Duration, 0, b.N)
		seen := make([]time.Duration, 0, b.N)
		var st0 int64
		b.ResetTimer()
		if requests != nil {
			st0 = requests()
		}
		for i := 1; i <= b.N; i++ {
			leader, next := cs[(i-1)%2], cs[i%2]
			v := fmt.Sprint("v", i)
			won := make(chan error, 1)
			var at time.Time
			go func() {
				err := next.Campaign(ctx, v)
				at = time.Now()
				won <- err
			}()
			e.Queued(b, name, next)
			start := time.Now()
			if err := leader.Resign(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-won; err != nil {
				b.Fatal(err)
			}
			hand = append(hand, at.Sub(start))
			seen = append(seen, obs.Wait(b, v).Sub(start))
		}
		b.StopTimer()
		if requests != nil {
			b.ReportMetric(float64(requests()-st0)/float64(b.N), "store-req/handover")
		}
		ReportLatencies(b, "handover-", hand)
		ReportLatencies(b, "observe-", seen)
		b.ReportMetric(0, "ns/op")
	})
}

// ReportLatencies reports the p50 and p99 of lat, in µs, as
// prefix+"p50-µs" and prefix+"p99-µs".
func ReportLatencies(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(q(0.50), prefix+"p50-µs")
	b.ReportMetric(q(0.99), prefix+"p99-µs")
}

// Deliveries records when an observer first delivered each value (see
// [WatchDeliveries]).
type Deliveries struct {
	mu   sync.Mutex
	at   map[string]time.Time
	cond chan struct{} // closed and replaced on each delivery
}

// WatchDeliveries records the time each value first comes on ch, until
// ch closes.
func WatchDeliveries(ch <-chan string) *Deliveries {
	vs := &Deliveries{at: make(map[string]time.Time), cond: make(chan struct{})}
	go func() {
		for v := range ch {
			now := time.Now()
			vs.mu.Lock()
			if _, ok := vs.at[v]; !ok {
				vs.at[v] = now
			}
			close(vs.cond)
			vs.cond = make(chan struct{})
			vs.mu.Unlock()
		}
	}()
	return vs
}

// Wait returns when v was delivered, waiting up to a minute for it.
func (vs *Deliveries) Wait(b *testing.B, v string) time.Time {
	deadline := time.After(time.Minute)
	for {
		vs.mu.Lock()
		t, ok := vs.at[v]
		c := vs.cond
		vs.mu.Unlock()
		if ok {
			return t
		}
		select {
		case <-c:
		case <-deadline:
			b.Fatalf("the observer never delivered %q", v)
		}
	}
}

// dlockElectorate runs the election workload on dlock Clients; a
// candidate knows it is queued from its Client's Tracer (AcquireWait).
type dlockElectorate struct{ newBackend Factory }

func (e *dlockElectorate) client(b *testing.B, opts ...dlock.Option) *dlock.Client {
	be := e.newBackend(b)
	if g, ok := be.(dlock.Granter); !ok || g.CanGrant(dlock.KindElection, 1) != nil {
		be.Close()
		b.Skipf("%s holds no elections", be)
	}
	c, err := dlock.New(be, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func (e *dlockElectorate) Candidate(b *testing.B, name string) Candidate {
	t := newQueueTracer()
	return &dlockCandidate{e: e.client(b, dlock.WithTracer(t)).Election(name), t: t}
}

func (e *dlockElectorate) Observe(b *testing.B, ctx context.Context, name string) <-chan string {
	out := make(chan string, 1024)
	lds := e.client(b).Election(name).Observe(ctx)
	go func() {
		defer close(out)
		for ld := range lds {
			if ld.Err == nil && ld.Owner != "" {
				out <- ld.Value
			}
		}
	}()
	return out
}

func (e *dlockElectorate) Queued(b *testing.B, name string, c Candidate) {
	select {
	case <-c.(*dlockCandidate).t.queued():
	case <-time.After(time.Minute):
		b.Fatalf("the candidate of %s never queued", name)
	}
}

type dlockCandidate struct {
	e *dlock.Election
	t *queueTracer
}

func (d *dlockCandidate) Campaign(ctx context.Context, value string) error {
	d.t.reset()
	_, err := d.e.Campaign(ctx, value)
	return err
}

func (d *dlockCandidate) Resign(ctx context.Context) error { return d.e.Resign(ctx) }

// queueTracer signals once per campaign, when its Client's acquisition
// first waits (the backend has queued it).
type queueTracer struct {
	mu      sync.Mutex
	waiting bool // the campaign has signalled
	ch      chan struct{}
}

func newQueueTracer() *queueTracer { return &queueTracer{ch: make(chan struct{}, 1)} }

func (t *queueTracer) reset() {
	t.mu.Lock()
	t.waiting = false
	t.mu.Unlock()
}

func (t *queueTracer) queued() <-chan struct{} { return t.ch }

func (t *queueTracer) AcquireStart(ctx context.Context, _ dlock.TraceAcquire) context.Context {
	return ctx
}

func (t *queueTracer) AcquireWait(context.Context, dlock.TraceAcquire, dlock.TraceWait) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.waiting {
		t.waiting = true
		t.ch <- struct{}{}
	}
}

func (t *queueTracer) AcquireEnd(context.Context, dlock.TraceAcquire, dlock.TraceAcquireEnd) {}
func (t *queueTracer) Renewed(*dlock.Lease, dlock.TraceRenew)                                {}
func (t *queueTracer) LeaseEnd(*dlock.Lease, dlock.TraceLeaseEnd)                            {}
