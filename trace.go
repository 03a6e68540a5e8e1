package dlock

import (
	"context"
	"strconv"
	"time"
)

// Tracer is told of every acquisition, wait, grant or failure, renewal and
// end of a lease of a Client, in the shape of pgx's QueryTracer: set one
// with [WithTracer] to feed metrics and traces (the otel and prometheus
// modules have adapters). Without one, nothing is allocated or measured.
//
// Methods are called synchronously on the goroutine doing the work, with
// no lock of dlock held, and must return quickly: a tracer that blocks
// delays the lock path that called it (a renewal, a release) — send to a
// buffered channel or record atomically instead. A method that panics is
// recovered and logged at error level, and the lock path goes on. A tracer
// must not call back into the Lease it is told about from within a method.
type Tracer interface {
	// AcquireStart is called when a Lock, TryLock, Acquire, RLock or
	// Campaign starts; the context it returns is passed to the other two
	// calls of the acquisition (a span's, say).
	AcquireStart(ctx context.Context, a TraceAcquire) context.Context
	// AcquireWait is called when the acquisition finds the name held and
	// waits, each time the holder it learns of changes. It subsumes
	// [OnWait].
	AcquireWait(ctx context.Context, a TraceAcquire, w TraceWait)
	// AcquireEnd is called once per acquisition, with its outcome.
	AcquireEnd(ctx context.Context, a TraceAcquire, e TraceAcquireEnd)
	// Renewed is called after each renewal of a lease (the Client's loop
	// and Extend), successful or not.
	Renewed(l *Lease, r TraceRenew)
	// LeaseEnd is called once when a lease ends, with a typed cause.
	LeaseEnd(l *Lease, e TraceLeaseEnd)
}

// TraceAcquire describes an acquisition.
type TraceAcquire struct {
	Name    string // the lock's name, without the Client's namespace
	Op      string // "lock", "trylock", "acquire", "rlock", "campaign", …
	Kind    Kind
	Limit   int
	Weight  int
	Backend string    // the Client's backend description (no secrets)
	Start   time.Time // on the Client's clock
}

// TraceWait describes what an acquisition waits for.
type TraceWait struct {
	Holder Holder // the holder the backend named
	// Held and Limit are the weight held and the limit of a name that can
	// have several holders; 0 for a mutex.
	Held, Limit int
}

// Outcome is how an acquisition ended, as a label.
type Outcome uint8

// The outcomes of an acquisition.
const (
	OutcomeGranted     Outcome = iota + 1
	OutcomeBusy                // TryLock found the name held
	OutcomeCanceled            // the caller's context ended while it waited
	OutcomeUnavailable         // the store could not be reached
	OutcomeInvalid             // a bad name or option, refused before the store
	OutcomeClosed              // the Client was closed
	OutcomeError               // anything else (foreign data, …)
)

var outcomeNames = [...]string{"", "granted", "busy", "canceled", "unavailable", "invalid", "closed", "error"}

// String returns the outcome's label: "granted", "busy", "canceled",
// "unavailable", "invalid", "closed" or "error".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// TraceAcquireEnd is the end of an acquisition.
type TraceAcquireEnd struct {
	Outcome Outcome
	Lease   *Lease        // the granted lease; nil unless granted
	Err     error         // the error returned; nil when granted
	Waited  time.Duration // from the start to the grant or failure, on the Client's clock
}

// TraceRenew is a renewal of a lease.
type TraceRenew struct {
	Backend string        // the Client's backend description
	Latency time.Duration // from sending to the answer
	Err     error         // nil when renewed
}

// EndCause says why a lease ended, as a label (see [Lease.EndCause]).
type EndCause uint8

// The causes of a lease's end.
const (
	EndUnlocked       EndCause = iota + 1 // Unlock (or Resign)
	EndRenewalRefused                     // the store said the hold was lost (a renewal, Extend, Proclaim, Downgrade)
	EndDeadlinePassed                     // the validity deadline passed without a successful renewal
	EndSessionLost                        // the backend reported the hold lost (a ZooKeeper session, a dropped connection)
	EndMaxHold                            // MaxHold was reached
	EndClosed                             // the Client was closed
)

var causeNames = [...]string{"", "unlocked", "renewal_refused", "deadline_passed", "session_lost", "max_hold", "closed"}

// String returns the cause's label: "unlocked", "renewal_refused",
// "deadline_passed", "session_lost", "max_hold" or "closed".
func (c EndCause) String() string {
	if int(c) < len(causeNames) && c > 0 {
		return causeNames[c]
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// TraceLeaseEnd is the end of a lease.
type TraceLeaseEnd struct {
	Backend string // the Client's backend description
	Cause   EndCause
	Held    time.Duration // from the grant's request to the end, on the Client's clock
	Err     error         // why it ended; nil for EndUnlocked
}

// WithTracer sets the Client's tracer (default: none). It is a Client
// option.
func WithTracer(t Tracer) Option {
	return clientOption("WithTracer", func(c *config) {
		if c.errs.Check(t != nil, "WithTracer(nil)") {
			c.tracer = t
		}
	})
}

// traced calls f, recovering a panic of the tracer.
func (c *Client) traced(f func()) {
	defer func() {
		if r := recover(); r != nil {
			c.cfg.logger.Error("dlock: the tracer panicked; ignored", "backend", c.desc, "panic", r)
		}
	}()
	f()
}

// outcomeOf maps an acquisition error's kind to an outcome.
func outcomeOf(kind error) Outcome {
	switch kind {
	case ErrNotAcquired:
		return OutcomeBusy
	case ErrBackendUnavailable, ErrNoQuorum:
		return OutcomeUnavailable
	case ErrInvalidName, ErrInvalidOption:
		return OutcomeInvalid
	case ErrClosed:
		return OutcomeClosed
	}
	return OutcomeError
}

// EndCause returns why the lease ended, or 0 while it is held.
func (l *Lease) EndCause() EndCause {
	l.mu.Lock()
	if l.err == nil && l.c.now() >= l.deadline {
		l.expireLocked()
	}
	c := l.endCause
	l.unlock()
	return c
}

// unlock lets go of l.mu and then tells the tracer of an end that
// happened while it was held: the tracer runs with no lock held.
func (l *Lease) unlock() {
	if !l.traceEnd {
		l.mu.Unlock()
		return
	}
	l.traceEnd = false
	ev := TraceLeaseEnd{Backend: l.c.desc, Cause: l.endCause, Held: time.Duration(l.c.now() - l.granted)}
	if l.endCause != EndUnlocked {
		ev.Err = l.errLocked()
	}
	l.mu.Unlock()
	t := l.c.cfg.tracer
	l.c.traced(func() { t.LeaseEnd(l, ev) })
}

// traceRenew tells the tracer of a renewal of l sent at sent and answered
// at done.
func (l *Lease) traceRenew(sent, done instant, err error) {
	if t := l.c.cfg.tracer; t != nil {
		l.c.traced(func() { t.Renewed(l, TraceRenew{Backend: l.c.desc, Latency: time.Duration(done - sent), Err: err}) })
	}
}
