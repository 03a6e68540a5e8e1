// Package dlockotel reports dlock's locks to OpenTelemetry: metrics through
// a MeterProvider and spans through a TracerProvider, as a [dlock.Tracer].
//
//	t, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
//	c, err := dlock.Open(ctx, url, dlock.WithTracer(t))
//
// It lives in a module of its own, so that the OpenTelemetry dependencies
// reach only programs that import it.
//
// # Metrics
//
// OpenTelemetry has no semantic convention for locks. The names follow the
// database client's connection-pool metrics (db.client.connection.*), the
// nearest thing: waiting for a lock is waiting for a connection, holding
// one is using it.
//
//	dlock.lock.wait_time         histogram, s   wait_time: start of an acquisition to its grant or failure (db.client.connection.wait_time)
//	dlock.lock.hold_time         histogram, s   use_time: grant to the lease's end (db.client.connection.use_time)
//	dlock.lock.renewal.duration  histogram, s   one renewal's round trip
//	dlock.lock.acquisitions      counter        acquisitions by outcome
//	dlock.lock.losses            counter        leases that ended other than by Unlock, by cause
//	dlock.lock.held              up-down        leases held now (db.client.connection.count, state=used)
//	dlock.lock.pending_requests  up-down        acquisitions waiting now (db.client.connection.pending_requests)
//
// Attributes are of low cardinality: dlock.backend (the store's type,
// "redis", "postgres", …), dlock.kind ("mutex", "semaphore", …),
// dlock.outcome ("granted", "busy", "canceled", "unavailable", "invalid",
// "closed", "error") and dlock.cause ("unlocked", "renewal_refused",
// "deadline_passed", "session_lost", "max_hold", "closed"); the lock's name
// (dlock.lock.name) only with [WithLockName].
//
// # Spans
//
// A span "dlock.acquire" per acquisition, with the wait as an event
// ("dlock.wait", naming the holder) and the token as an attribute; a span
// "dlock.release" when a lease ends, with its cause and hold time.
package dlockotel

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/dlock-dev/dlock/otel"

// Option configures the Tracer.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	withName bool
}

// WithMeterProvider sets the MeterProvider (default: otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the TracerProvider (default: otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithLockName adds the lock's name to metrics (dlock.lock.name): one time
// series per name, so only for a bounded set of names. Spans always carry
// it.
func WithLockName() Option { return func(c *config) { c.withName = true } }

// Tracer is a [dlock.Tracer] that records to OpenTelemetry.
type Tracer struct {
	cfg                  config
	tracer               trace.Tracer
	wait, hold, renewal  metric.Float64Histogram
	acquisitions, losses metric.Int64Counter
	held, pending        metric.Int64UpDownCounter
}

var _ dlock.Tracer = (*Tracer)(nil)

// New returns a Tracer with its instruments made.
func New(opts ...Option) (*Tracer, error) {
	t := &Tracer{}
	for _, o := range opts {
		o(&t.cfg)
	}
	if t.cfg.mp == nil {
		t.cfg.mp = otel.GetMeterProvider()
	}
	if t.cfg.tp == nil {
		t.cfg.tp = otel.GetTracerProvider()
	}
	m := t.cfg.mp.Meter(ScopeName)
	t.tracer = t.cfg.tp.Tracer(ScopeName)
	var err error
	seconds := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	mk := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	mk(func() (e error) {
		t.wait, e = m.Float64Histogram("dlock.lock.wait_time", metric.WithUnit("s"), seconds,
			metric.WithDescription("Time from the start of an acquisition to its grant or failure."))
		return
	})
	mk(func() (e error) {
		t.hold, e = m.Float64Histogram("dlock.lock.hold_time", metric.WithUnit("s"), seconds,
			metric.WithDescription("Time from a grant to the lease's end."))
		return
	})
	mk(func() (e error) {
		t.renewal, e = m.Float64Histogram("dlock.lock.renewal.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("Round trip of one lease renewal."))
		return
	})
	mk(func() (e error) {
		t.acquisitions, e = m.Int64Counter("dlock.lock.acquisitions", metric.WithUnit("{acquisition}"),
			metric.WithDescription("Acquisitions, by outcome."))
		return
	})
	mk(func() (e error) {
		t.losses, e = m.Int64Counter("dlock.lock.losses", metric.WithUnit("{lease}"),
			metric.WithDescription("Leases that ended other than by Unlock, by cause."))
		return
	})
	mk(func() (e error) {
		t.held, e = m.Int64UpDownCounter("dlock.lock.held", metric.WithUnit("{lease}"),
			metric.WithDescription("Leases held now."))
		return
	})
	mk(func() (e error) {
		t.pending, e = m.Int64UpDownCounter("dlock.lock.pending_requests", metric.WithUnit("{request}"),
			metric.WithDescription("Acquisitions waiting now."))
		return
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// backendType is the store's type, the first word of a backend's
// description ("redis 127.0.0.1:6379" → "redis"): an address would be
// one series per server.
func backendType(desc string) string {
	if i := strings.IndexByte(desc, ' '); i > 0 {
		return desc[:i]
	}
	return desc
}

func (t *Tracer) attrs(backend string, kind dlock.Kind, name string, more ...attribute.KeyValue) metric.MeasurementOption {
	kv := append([]attribute.KeyValue{attribute.String("dlock.backend", backendType(backend)), attribute.String("dlock.kind", kind.String())}, more...)
	if t.cfg.withName {
		kv = append(kv, attribute.String("dlock.lock.name", name))
	}
	return metric.WithAttributes(kv...)
}

// AcquireStart starts the acquisition's span and counts it as pending.
func (t *Tracer) AcquireStart(ctx context.Context, a dlock.TraceAcquire) context.Context {
	ctx, _ = t.tracer.Start(ctx, "dlock.acquire", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(a.Start),
		trace.WithAttributes(attribute.String("dlock.lock.name", a.Name), attribute.String("dlock.backend", a.Backend),
			attribute.String("dlock.kind", a.Kind.String()), attribute.String("dlock.operation", a.Op), attribute.Int("dlock.weight", a.Weight)))
	t.pending.Add(ctx, 1, t.attrs(a.Backend, a.Kind, a.Name))
	return ctx
}

// AcquireWait adds the wait to the span as an event naming the holder.
func (t *Tracer) AcquireWait(ctx context.Context, a dlock.TraceAcquire, w dlock.TraceWait) {
	trace.SpanFromContext(ctx).AddEvent("dlock.wait", trace.WithAttributes(
		attribute.String("dlock.holder.owner", w.Holder.Owner), attribute.Int64("dlock.holder.token", int64(w.Holder.Token)),
		attribute.Int("dlock.held", w.Held), attribute.Int("dlock.limit", w.Limit)))
}

// AcquireEnd records the outcome and ends the span.
func (t *Tracer) AcquireEnd(ctx context.Context, a dlock.TraceAcquire, e dlock.TraceAcquireEnd) {
	out := attribute.String("dlock.outcome", e.Outcome.String())
	t.pending.Add(ctx, -1, t.attrs(a.Backend, a.Kind, a.Name))
	t.wait.Record(ctx, e.Waited.Seconds(), t.attrs(a.Backend, a.Kind, a.Name, out))
	t.acquisitions.Add(ctx, 1, t.attrs(a.Backend, a.Kind, a.Name, out))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(out)
	if e.Lease != nil {
		t.held.Add(ctx, 1, t.attrs(a.Backend, a.Kind, a.Name))
		span.SetAttributes(attribute.Int64("dlock.token", int64(e.Lease.Token())))
	} else if e.Err != nil {
		span.RecordError(e.Err)
		if e.Outcome != dlock.OutcomeBusy {
			span.SetStatus(codes.Error, e.Outcome.String())
		}
	}
	span.End(trace.WithTimestamp(a.Start.Add(e.Waited)))
}

// Renewed records a renewal's round trip.
func (t *Tracer) Renewed(l *dlock.Lease, r dlock.TraceRenew) {
	res := "ok"
	if r.Err != nil {
		res = "error"
	}
	t.renewal.Record(context.Background(), r.Latency.Seconds(), t.attrs(r.Backend, l.Kind(), l.Name(), attribute.String("dlock.result", res)))
}

// LeaseEnd records the hold time and the cause, and makes the release span.
func (t *Tracer) LeaseEnd(l *dlock.Lease, e dlock.TraceLeaseEnd) {
	ctx := context.Background()
	cause := attribute.String("dlock.cause", e.Cause.String())
	t.held.Add(ctx, -1, t.attrs(e.Backend, l.Kind(), l.Name()))
	t.hold.Record(ctx, e.Held.Seconds(), t.attrs(e.Backend, l.Kind(), l.Name(), cause))
	if e.Cause != dlock.EndUnlocked {
		t.losses.Add(ctx, 1, t.attrs(e.Backend, l.Kind(), l.Name(), cause))
	}
	now := time.Now()
	_, span := t.tracer.Start(ctx, "dlock.release", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(now),
		trace.WithAttributes(attribute.String("dlock.lock.name", l.Name()), attribute.String("dlock.backend", e.Backend),
			attribute.String("dlock.kind", l.Kind().String()), attribute.Int64("dlock.token", int64(l.Token())),
			cause, attribute.Float64("dlock.hold_time", e.Held.Seconds())))
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Cause.String())
	}
	span.End(trace.WithTimestamp(now))
}
