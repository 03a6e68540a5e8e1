// Package dlockprom exposes dlock's locks as Prometheus metrics: a
// [Collector] that is also a [dlock.Tracer].
//
//	col := dlockprom.New()
//	prometheus.MustRegister(col)
//	c, err := dlock.Open(ctx, url, dlock.WithTracer(col))
//
// It lives in a module of its own, so that client_golang reaches only
// programs that import it.
//
// # Metrics
//
//	dlock_lock_wait_seconds          histogram  start of an acquisition to its grant or failure; labels backend, kind, outcome
//	dlock_lock_hold_seconds          histogram  grant to the lease's end; backend, kind, cause
//	dlock_lock_renewal_seconds       histogram  one renewal's round trip; backend, kind, result
//	dlock_lock_acquisitions_total    counter    acquisitions; backend, kind, outcome
//	dlock_lock_losses_total          counter    leases that ended other than by Unlock; backend, kind, cause
//	dlock_lock_held                  gauge      leases held now; backend, kind
//	dlock_lock_waiting               gauge      acquisitions waiting now; backend, kind
//
// Labels are of low cardinality: backend is the store's type ("redis",
// "postgres", …), kind "mutex", "semaphore", "read-write lock" or
// "election", outcome "granted", "busy", "canceled", "unavailable",
// "invalid", "closed" or "error", cause "unlocked", "renewal_refused",
// "deadline_passed", "session_lost", "max_hold" or "closed". The lock's
// name is a label ("name") only with [WithLockName]: one series per name.
package dlockprom

import (
	"context"
	"strings"

	"github.com/dlock-dev/dlock"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures the Collector.
type Option func(*config)

type config struct {
	withName bool
	ns       string
	buckets  []float64
}

// WithLockName adds the lock's name as a label "name" to every metric: one
// series per name, so only for a bounded set of names.
func WithLockName() Option { return func(c *config) { c.withName = true } }

// WithNamespace puts a prefix before the metric names
// ("myapp_dlock_lock_…").
func WithNamespace(ns string) Option { return func(c *config) { c.ns = ns } }

// WithBuckets sets the histograms' buckets, in seconds.
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// DefaultBuckets are the histograms' buckets: half a millisecond (a Redis
// round trip) to five minutes (a long wait).
var DefaultBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Collector is a prometheus.Collector of dlock's metrics, fed as the
// dlock.Tracer of one or more Clients.
type Collector struct {
	cfg                  config
	wait, hold, renewal  *prometheus.HistogramVec
	acquisitions, losses *prometheus.CounterVec
	held, waiting        *prometheus.GaugeVec
}

var (
	_ dlock.Tracer         = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// New returns a Collector; register it with a prometheus.Registerer and
// give it to dlock.WithTracer.
func New(opts ...Option) *Collector {
	col := &Collector{cfg: config{buckets: DefaultBuckets}}
	for _, o := range opts {
		o(&col.cfg)
	}
	labels := func(l ...string) []string {
		l = append([]string{"backend", "kind"}, l...)
		if col.cfg.withName {
			l = append(l, "name")
		}
		return l
	}
	hist := func(name, help string, l ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: col.cfg.ns, Subsystem: "dlock", Name: name, Help: help, Buckets: col.cfg.buckets}, labels(l...))
	}
	col.wait = hist("lock_wait_seconds", "Time from the start of an acquisition to its grant or failure.", "outcome")
	col.hold = hist("lock_hold_seconds", "Time from a grant to the lease's end.", "cause")
	col.renewal = hist("lock_renewal_seconds", "Round trip of one lease renewal.", "result")
	col.acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: col.cfg.ns, Subsystem: "dlock", Name: "lock_acquisitions_total",
		Help: "Acquisitions, by outcome."}, labels("outcome"))
	col.losses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: col.cfg.ns, Subsystem: "dlock", Name: "lock_losses_total",
		Help: "Leases that ended other than by Unlock, by cause."}, labels("cause"))
	col.held = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: col.cfg.ns, Subsystem: "dlock", Name: "lock_held",
		Help: "Leases held now."}, labels())
	col.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: col.cfg.ns, Subsystem: "dlock", Name: "lock_waiting",
		Help: "Acquisitions waiting now."}, labels())
	return col
}

func (col *Collector) all() []prometheus.Collector {
	return []prometheus.Collector{col.wait, col.hold, col.renewal, col.acquisitions, col.losses, col.held, col.waiting}
}

// Describe sends the metrics' descriptions.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range col.all() {
		c.Describe(ch)
	}
}

// Collect sends the metrics.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range col.all() {
		c.Collect(ch)
	}
}

// backendType is the store's type, the first word of a backend's
// description ("redis 127.0.0.1:6379" → "redis").
func backendType(desc string) string {
	if i := strings.IndexByte(desc, ' '); i > 0 {
		return desc[:i]
	}
	return desc
}

func (col *Collector) values(backend string, kind dlock.Kind, name string, more ...string) []string {
	v := append([]string{backendType(backend), kind.String()}, more...)
	if col.cfg.withName {
		v = append(v, name)
	}
	return v
}

// AcquireStart counts the acquisition as waiting.
func (col *Collector) AcquireStart(ctx context.Context, a dlock.TraceAcquire) context.Context {
	col.waiting.WithLabelValues(col.values(a.Backend, a.Kind, a.Name)...).Inc()
	return ctx
}

// AcquireWait records nothing: the wait is measured at its end.
func (col *Collector) AcquireWait(context.Context, dlock.TraceAcquire, dlock.TraceWait) {}

// AcquireEnd records the outcome and the wait.
func (col *Collector) AcquireEnd(ctx context.Context, a dlock.TraceAcquire, e dlock.TraceAcquireEnd) {
	out := e.Outcome.String()
	col.waiting.WithLabelValues(col.values(a.Backend, a.Kind, a.Name)...).Dec()
	col.wait.WithLabelValues(col.values(a.Backend, a.Kind, a.Name, out)...).Observe(e.Waited.Seconds())
	col.acquisitions.WithLabelValues(col.values(a.Backend, a.Kind, a.Name, out)...).Inc()
	if e.Lease != nil {
		col.held.WithLabelValues(col.values(a.Backend, a.Kind, a.Name)...).Inc()
	}
}

// Renewed records a renewal's round trip.
func (col *Collector) Renewed(l *dlock.Lease, r dlock.TraceRenew) {
	res := "ok"
	if r.Err != nil {
		res = "error"
	}
	col.renewal.WithLabelValues(col.values(r.Backend, l.Kind(), l.Name(), res)...).Observe(r.Latency.Seconds())
}

// LeaseEnd records the hold time, and the loss unless it was unlocked.
func (col *Collector) LeaseEnd(l *dlock.Lease, e dlock.TraceLeaseEnd) {
	cause := e.Cause.String()
	col.held.WithLabelValues(col.values(e.Backend, l.Kind(), l.Name())...).Dec()
	col.hold.WithLabelValues(col.values(e.Backend, l.Kind(), l.Name(), cause)...).Observe(e.Held.Seconds())
	if e.Cause != dlock.EndUnlocked {
		col.losses.WithLabelValues(col.values(e.Backend, l.Kind(), l.Name(), cause)...).Inc()
	}
}
