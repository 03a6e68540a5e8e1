package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/mem"
)

// recordingTracer keeps what it is told.
type recordingTracer struct {
	mu     sync.Mutex
	starts []dlock.TraceAcquire
	waits  []dlock.TraceWait
	ends   []dlock.TraceAcquireEnd
	renews []dlock.TraceRenew
	leases []dlock.TraceLeaseEnd
	panics bool
}

type ctxKey struct{}

func (r *recordingTracer) AcquireStart(ctx context.Context, a dlock.TraceAcquire) context.Context {
	r.mu.Lock()
	r.starts = append(r.starts, a)
	r.mu.Unlock()
	if r.panics {
		panic("tracer bug")
	}
	return context.WithValue(ctx, ctxKey{}, a.Op)
}

func (r *recordingTracer) AcquireWait(ctx context.Context, a dlock.TraceAcquire, w dlock.TraceWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, w)
}

func (r *recordingTracer) AcquireEnd(ctx context.Context, a dlock.TraceAcquire, e dlock.TraceAcquireEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.panics && ctx.Value(ctxKey{}) != a.Op {
		panic("AcquireEnd did not get AcquireStart's context")
	}
	r.ends = append(r.ends, e)
}

func (r *recordingTracer) Renewed(l *dlock.Lease, e dlock.TraceRenew) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews = append(r.renews, e)
}

func (r *recordingTracer) LeaseEnd(l *dlock.Lease, e dlock.TraceLeaseEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases = append(r.leases, e)
	if r.panics {
		panic("tracer bug")
	}
}

func (r *recordingTracer) snapshot() recordingTracer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recordingTracer{starts: append([]dlock.TraceAcquire(nil), r.starts...), waits: append([]dlock.TraceWait(nil), r.waits...),
		ends: append([]dlock.TraceAcquireEnd(nil), r.ends...), renews: append([]dlock.TraceRenew(nil), r.renews...),
		leases: append([]dlock.TraceLeaseEnd(nil), r.leases...)}
}

// TestTracerSeesLockWaitRenewalAndEnds: a grant, a busy TryLock, a
// contended wait, renewals, a loss by MaxHold and an Unlock, each with its
// outcome or typed cause.
func TestTracerSeesLockWaitRenewalAndEnds(t *testing.T) {
	ctx := context.Background()
	tr := &recordingTracer{}
	b := mem.New()
	c, err := dlock.New(b, dlock.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("t", dlock.TTL(300*time.Millisecond), dlock.MaxHold(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("t").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	waited := make(chan *dlock.Lease)
	go func() {
		l2, err := c.Mutex("t").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		waited <- l2
	}()
	<-l.Done() // MaxHold ends it; the waiter is granted
	l2 := <-waited
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s := tr.snapshot()
	if len(s.starts) != 3 || len(s.ends) != 3 {
		t.Fatalf("%d starts, %d ends; want 3 each", len(s.starts), len(s.ends))
	}
	outcomes := map[dlock.Outcome]int{}
	for _, e := range s.ends {
		outcomes[e.Outcome]++
	}
	if outcomes[dlock.OutcomeGranted] != 2 || outcomes[dlock.OutcomeBusy] != 1 {
		t.Errorf("outcomes %v, want 2 granted and 1 busy", outcomes)
	}
	if len(s.waits) == 0 || s.waits[0].Holder.Owner != l.Owner() {
		t.Errorf("waits %+v, want the holder %s", s.waits, l.Owner())
	}
	if len(s.renews) == 0 {
		t.Error("no renewal traced over a second of a 300ms TTL")
	}
	causes := map[dlock.EndCause]int{}
	for _, e := range s.leases {
		causes[e.Cause]++
	}
	if causes[dlock.EndMaxHold] != 1 || causes[dlock.EndUnlocked] != 1 {
		t.Errorf("lease ends %v, want one max_hold and one unlocked", causes)
	}
	if l.EndCause() != dlock.EndMaxHold || l2.EndCause() != dlock.EndUnlocked {
		t.Errorf("EndCause %v, %v", l.EndCause(), l2.EndCause())
	}
	if dlock.EndMaxHold.String() != "max_hold" || dlock.OutcomeCanceled.String() != "canceled" {
		t.Error("labels")
	}
}

// TestTracerPanicDoesNotBreakLocking: a tracer that panics is recovered;
// the lock path goes on.
func TestTracerPanicDoesNotBreakLocking(t *testing.T) {
	ctx := context.Background()
	c, err := dlock.New(mem.New(), dlock.WithTracer(&recordingTracer{panics: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("p").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("p").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNoTracerNoAllocation: without a Tracer, a Lock and Unlock allocate
// no more than with tracing compiled out would: the same count as a run
// measured with the tracer hooks skipped (the tracer checks are a nil test).
func TestNoTracerNoAllocation(t *testing.T) {
	ctx := context.Background()
	c, _ := dlock.New(mem.New())
	defer c.Close()
	m := c.Mutex("a")
	plain := testing.AllocsPerRun(200, func() {
		l, _ := m.Lock(ctx)
		l.Unlock(ctx)
	})
	ct, _ := dlock.New(mem.New(), dlock.WithTracer(nopTracer{}))
	defer ct.Close()
	mt := ct.Mutex("a")
	traced := testing.AllocsPerRun(200, func() {
		l, _ := mt.Lock(ctx)
		l.Unlock(ctx)
	})
	t.Logf("allocations per Lock+Unlock on mem: %v without a tracer, %v with a no-op tracer", plain, traced)
	if traced <= plain {
		t.Errorf("a no-op tracer allocated %v, no more than none (%v): the comparison measures nothing", traced, plain)
	}
}

type nopTracer struct{}

func (nopTracer) AcquireStart(ctx context.Context, _ dlock.TraceAcquire) context.Context { return ctx }
func (nopTracer) AcquireWait(context.Context, dlock.TraceAcquire, dlock.TraceWait)       {}
func (nopTracer) AcquireEnd(context.Context, dlock.TraceAcquire, dlock.TraceAcquireEnd)  {}
func (nopTracer) Renewed(*dlock.Lease, dlock.TraceRenew)                                 {}
func (nopTracer) LeaseEnd(*dlock.Lease, dlock.TraceLeaseEnd)                             {}

// BenchmarkLockUnlockTracer: Lock+Unlock on mem without a tracer and with
// a no-op one: the cost of the hooks when unused is a nil check.
//
//	go test -run XXX -bench LockUnlockTracer -benchmem .
func BenchmarkLockUnlockTracer(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		opts []dlock.Option
	}{{"none", nil}, {"nop", []dlock.Option{dlock.WithTracer(nopTracer{})}}} {
		b.Run(bc.name, func(b *testing.B) {
			c, _ := dlock.New(mem.New(), bc.opts...)
			defer c.Close()
			m := c.Mutex("b")
			b.ReportAllocs()
			for b.Loop() {
				l, _ := m.Lock(ctx)
				l.Unlock(ctx)
			}
		})
	}
}

// TestSilentByDefault: without WithLogger, a lost lease (which is logged
// at warning level to a Client's logger) writes nothing to slog.Default().
func TestSilentByDefault(t *testing.T) {
	var buf strings.Builder
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	c, err := dlock.New(mem.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("quiet", dlock.TTL(100*time.Millisecond), dlock.MaxHold(150*time.Millisecond)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("Err %v", l.Err())
	}
	if buf.Len() > 0 {
		t.Errorf("the library wrote to slog.Default(): %q", buf.String())
	}
}
