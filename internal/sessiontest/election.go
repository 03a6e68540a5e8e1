package sessiontest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// ElectionCut: a mutex request of an election's name is refused as
// another kind, not queued; then the server ends the connection of the
// election's leader. The leader learns of its loss (Done, Err) and can no longer proclaim; a
// candidate that waited is elected only after the old lease's Deadline,
// with a higher term and its own value; an observer sees the old leader,
// then the new one, never an older term after a newer; nothing is left
// behind.
func ElectionCut(t *testing.T, env Env) {
	ctx := context.Background()
	const (
		name = "sess-elect"
		ttl  = 3 * time.Second
	)
	lc, cc, oc := env.Client(t), env.Client(t), env.Client(t)
	leader := lc.Election(name, dlock.TTL(ttl))
	old, err := leader.Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}

	// A mutex request of the name, from another process, is refused as
	// another kind at once: it does not queue behind the leader.
	mctx, mcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = oc.Mutex(name).Lock(mctx)
	mcancel()
	var ce *dlock.ConflictError
	if !errors.As(err, &ce) || ce.Kind != dlock.KindElection || ce.AskedKind != dlock.KindMutex {
		t.Errorf("Lock of an election's name as a mutex: %v, want a ConflictError (election, asked mutex)", err)
	}

	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	obs := oc.Election(name).Observe(octx)
	first := <-obs
	if first.Err != nil || first.Owner != old.Owner() || first.Value != "old" || first.Term != old.Token() {
		t.Fatalf("observed first %+v, want the leader %s, value old, term %d", first, old.Owner(), old.Token())
	}

	type elected struct {
		l  *dlock.Lease
		at time.Time
	}
	got := make(chan elected, 1)
	waiting := make(chan struct{})
	var once sync.Once
	candidate := cc.Election(name, dlock.TTL(ttl), dlock.OnWait(func(dlock.Holder) { once.Do(func() { close(waiting) }) }))
	go func() {
		l, err := candidate.Campaign(octx, "next")
		if err != nil {
			t.Error(err)
		}
		got <- elected{l, time.Now()}
	}()
	select {
	case <-waiting:
	case r := <-got:
		t.Fatalf("the candidate was elected while the leader led: %v", r.l)
	}

	env.Cut(t, name)
	cut := time.Now()
	// At once, before or after the backend has seen the connection end:
	// the value must not change.
	if err := leader.Proclaim(ctx, "too late"); !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("Proclaim after the leader's connection was cut: %v, want ErrLeaseLost (or ErrInvalidOption once the loss is known)", err)
	}
	select {
	case <-old.Done():
		t.Logf("loss reported %v after the connection was cut (TTL %v)", time.Since(cut), ttl)
	case <-time.After(2 * ttl):
		t.Fatal("the loss of the leader's connection was not reported")
	}
	if err := old.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", err)
	}

	var r elected
	select {
	case r = <-got:
	case <-time.After(4 * ttl):
		t.Fatal("the candidate was not elected after the leader's connection was cut")
	}
	if r.l == nil {
		t.FailNow()
	}
	t.Logf("the candidate was elected %v after the cut, %v after the old leader's deadline", r.at.Sub(cut), r.at.Sub(old.Deadline()))
	if r.at.Before(old.Deadline()) {
		t.Errorf("the candidate was elected at %v, before the old leader's deadline %v", r.at, old.Deadline())
	}
	if r.l.Token() <= old.Token() {
		t.Errorf("term %d after %d", r.l.Token(), old.Token())
	}

	// The observer: the old leader (or "no leader") until the new one,
	// whose value is its own; never "too late", never an older term.
	last := first.Term
	for {
		var ld dlock.Leader
		select {
		case ld = <-obs:
		case <-octx.Done():
			t.Fatal("the observer never saw the new leader")
		}
		if ld.Err != nil {
			t.Fatalf("Observe: %v", ld.Err)
		}
		if ld.Value == "too late" {
			t.Errorf("observed %+v: a lost leader's Proclaim took effect", ld)
		}
		if ld.Owner != "" && ld.Term < last {
			t.Errorf("observed term %d after %d", ld.Term, last)
		}
		if ld.Owner != "" {
			last = ld.Term
		}
		if ld.Term == r.l.Token() {
			if ld.Owner != r.l.Owner() || ld.Value != "next" {
				t.Errorf("observed %+v, want the new leader %s with value next", ld, r.l.Owner())
			}
			break
		}
	}
	if ld, err := oc.Election(name).Leader(ctx); err != nil || ld.Term != r.l.Token() || ld.Value != "next" {
		t.Errorf("Leader: %+v, %v; want term %d, value next", ld, err, r.l.Token())
	}
	if err := candidate.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	env.noAdvisory(t, name)
}
