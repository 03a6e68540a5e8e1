package verify

import (
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// hist builds a history from a compact list of events.
type hist struct{ History }

func (h *hist) lock(w int, invoke, ok int64, token uint64, deadline int64) *hist {
	h.Events = append(h.Events,
		Event{T: invoke, Worker: w, Op: OpAcquire, Phase: Invoke},
		Event{T: ok, Worker: w, Op: OpAcquire, Phase: OK, Token: token, Deadline: deadline})
	return h
}

func (h *hist) unlock(w int, t int64) *hist {
	h.Events = append(h.Events, Event{T: t, Worker: w, Op: OpRelease, Phase: Invoke},
		Event{T: t + ms, Worker: w, Op: OpRelease, Phase: OK})
	return h
}

func (h *hist) renew(w int, t, deadline int64) *hist {
	h.Events = append(h.Events, Event{T: t, Worker: w, Op: OpRenew, Phase: OK, Deadline: deadline})
	return h
}

func (h *hist) lost(w int, t int64) *hist {
	h.Events = append(h.Events, Event{T: t, Worker: w, Op: OpLost, Phase: OK})
	return h
}

func (h *hist) write(w int, t int64, token uint64, read, value int64, accepted bool) *hist {
	h.Writes = append(h.Writes, Write{T: t, Worker: w, Token: token, Read: read, Value: value, Accepted: accepted})
	return h
}

func (h *hist) fault(f Fault) *hist {
	h.Faults = append(h.Faults, f)
	return h
}

func TestCleanHistoryPasses(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 1000*ms).write(1, 2*ms, 1, 0, 1, true).unlock(1, 3*ms).
		lock(2, 1*ms, 5*ms, 2, 1000*ms).renew(2, 300*ms, 1300*ms).write(2, 6*ms, 2, 1, 2, true).unlock(2, 900*ms).
		lock(3, 2*ms, 901*ms, 3, 2000*ms).write(3, 902*ms, 3, 2, 3, true).unlock(3, 903*ms)
	r := Check(h.History)
	if r.Failed() || len(r.Violations) != 0 {
		t.Fatalf("clean history: %+v", r.Violations)
	}
	if len(r.Grants) != 3 || r.Accepted != 3 || r.LostUpdates != 0 {
		t.Fatalf("grants %d accepted %d lost %d, want 3 3 0", len(r.Grants), r.Accepted, r.LostUpdates)
	}
}

// A holder paused past its deadline: the next grant after the deadline is
// fine, its late write is refused, and the raw overlap is reported but is
// no failure.
func TestPausedHolderFencedPasses(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).
		lock(2, 2*ms, 150*ms, 2, 1150*ms).write(2, 151*ms, 2, 0, 1, true).
		write(1, 300*ms, 1, 0, 1, false).lost(1, 301*ms).
		unlock(2, 400*ms)
	r := Check(h.History)
	if r.Failed() {
		t.Fatalf("paused holder: %+v", r.Violations)
	}
	if r.Count(CheckOverlap) != 1 {
		t.Fatalf("raw overlaps %d, want 1", r.Count(CheckOverlap))
	}
}

func TestGrantInsideValidityFails(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms). // 50 ms before worker 1's deadline
		unlock(1, 60*ms).unlock(2, 70*ms)
	r := Check(h.History)
	if r.Count(CheckPromise) != 1 || !r.Failed() {
		t.Fatalf("violations %+v, want one (a)", r.Violations)
	}
	if !strings.Contains(r.Violations[0].Detail, "worker 2 was granted token 2 while worker 1") {
		t.Errorf("detail %q", r.Violations[0].Detail)
	}
}

// A renewal seen after the deadline does not revive the grant, so a grant
// between the deadline and that renewal is no violation; a renewal before
// the deadline extends it, so a grant then is.
func TestRenewalExtendsOnlyBeforeDeadline(t *testing.T) {
	late := (&hist{}).lock(1, 0, 1*ms, 1, 100*ms).renew(1, 120*ms, 300*ms).
		lock(2, 2*ms, 110*ms, 2, 1000*ms)
	if r := Check(late.History); r.Failed() {
		t.Fatalf("late renewal: %+v", r.Violations)
	}
	inTime := (&hist{}).lock(1, 0, 1*ms, 1, 100*ms).renew(1, 90*ms, 300*ms).
		lock(2, 2*ms, 110*ms, 2, 1000*ms)
	if r := Check(inTime.History); r.Count(CheckPromise) != 1 {
		t.Fatalf("renewed lease: %+v, want one (a)", r.Violations)
	}
}

func TestTokensOutOfOrderFail(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 5, 100*ms).unlock(1, 2*ms).
		lock(2, 3*ms, 4*ms, 5, 100*ms).unlock(2, 5*ms). // equal token, asked after 1 returned
		lock(3, 6*ms, 7*ms, 4, 100*ms).unlock(3, 8*ms)  // lower
	r := Check(h.History)
	if r.Count(CheckOrder) != 2 {
		t.Fatalf("violations %+v, want two (b)", r.Violations)
	}
	// Concurrent requests may return in either order: no violation.
	c := (&hist{}).
		lock(1, 0, 10*ms, 7, 100*ms).unlock(1, 11*ms).
		lock(2, 1*ms, 12*ms, 6, 100*ms).unlock(2, 13*ms)
	if r := Check(c.History); r.Count(CheckOrder) != 0 {
		t.Fatalf("overlapping requests: %+v", r.Violations)
	}
}

func TestStaleWriteAcceptedFails(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).lock(2, 2*ms, 150*ms, 2, 1000*ms).
		write(2, 151*ms, 2, 0, 1, true).
		write(1, 300*ms, 1, 0, 1, true) // the fence was off
	r := Check(h.History)
	if r.Count(CheckFence) != 1 {
		t.Fatalf("violations %+v, want one (c)", r.Violations)
	}
	if r.LostUpdates != 1 || r.LostUpdateRate() != 0.5 {
		t.Fatalf("lost %d rate %v, want 1 0.5", r.LostUpdates, r.LostUpdateRate())
	}
}

// A stale write that lands between the new holder's read and its write is
// accepted by a resource that fences only writes (tokens 1 < 2 in write
// order) and loses an update: fencing the read catches it.
func TestStaleWriteAfterNewerReadFails(t *testing.T) {
	h := (&hist{}).lock(1, 0, 1*ms, 1, 100*ms).lock(2, 2*ms, 150*ms, 2, 1000*ms)
	h.Writes = append(h.Writes, Write{T: 151 * ms, Op: "read", Worker: 2, Token: 2, Value: 0, Accepted: true})
	h.write(1, 152*ms, 1, 0, 1, true).write(2, 153*ms, 2, 0, 1, true)
	r := Check(h.History)
	if r.Count(CheckFence) != 1 || r.LostUpdates != 1 || r.Writes != 2 || r.Accepted != 2 {
		t.Fatalf("violations %+v, lost %d, writes %d accepted %d: want one (c), one lost update, 2 writes",
			r.Violations, r.LostUpdates, r.Writes, r.Accepted)
	}
}

func TestOutsideFaultIsLabelled(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms).
		fault(Fault{Kind: "failover", Worker: -1, Start: 40 * ms, End: 60 * ms, Outside: true, Label: "redis failover"})
	r := Check(h.History)
	if r.Failed() || r.Labelled(CheckPromise) != 1 || r.Violations[0].Outside != "redis failover" {
		t.Fatalf("violations %+v, want one labelled (a)", r.Violations)
	}
}

// A fault of one worker labels only the violations that involve it.
func TestWorkerFaultLabelsOnlyItsWorker(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms).
		fault(Fault{Kind: "skew", Worker: 3, Start: 0, End: 1 << 62, Outside: true, Label: "skew"})
	if r := Check(h.History); !r.Failed() || r.Count(CheckPromise) != 1 {
		t.Fatalf("violations %+v, want one (a) not labelled", r.Violations)
	}
	h.Faults[0].Worker = 2
	if r := Check(h.History); r.Failed() || r.Labelled(CheckPromise) != 1 {
		t.Fatalf("violations %+v, want one labelled (a)", r.Violations)
	}
}

func TestKilledHolder(t *testing.T) {
	h := (&hist{}).
		lock(1, 0, 1*ms, 1, 100*ms).
		fault(Fault{Kind: "kill", Worker: 1, Start: 10 * ms, End: 10 * ms}).
		lock(2, 5*ms, 130*ms, 2, 1000*ms)
	r := Check(h.History)
	if r.Failed() || r.Count(CheckOverlap) != 0 {
		t.Fatalf("killed holder: %+v", r.Violations)
	}
	if len(r.KillToGrant) != 1 || r.KillToGrant[0] != 120*time.Millisecond {
		t.Fatalf("kill to grant %v, want [120ms]", r.KillToGrant)
	}
}

func TestReadEventsSkipsTornLastLine(t *testing.T) {
	var h History
	in := `{"t":1,"worker":1,"op":"acquire","phase":"invoke"}
{"t":2,"worker":1,"op":"acquire","phase":"ok","token":3}
{"t":3,"worker":1,"op":"rel`
	if err := h.ReadEvents(strings.NewReader(in)); err != nil || len(h.Events) != 2 {
		t.Fatalf("events %d, err %v", len(h.Events), err)
	}
	bad := "{\"t\":1}\nnot json\n{\"t\":2}\n"
	if err := h.ReadEvents(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad line in the middle: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if p := Percentile(ds, 50); p != 3 {
		t.Errorf("p50 = %v", p)
	}
	if p := Percentile(ds, 100); p != 5 {
		t.Errorf("p100 = %v", p)
	}
	if p := Percentile(nil, 99); p != 0 {
		t.Errorf("empty p99 = %v", p)
	}
}

// porcupine agrees with the checker on (a) and (b).
func TestPorcupineAgrees(t *testing.T) {
	clean := (&hist{}).lock(1, 0, 1*ms, 1, 1000*ms).unlock(1, 3*ms).lock(2, 1*ms, 5*ms, 2, 1000*ms).unlock(2, 9*ms)
	overlap := (&hist{}).lock(1, 0, 1*ms, 1, 100*ms).lock(2, 2*ms, 50*ms, 2, 1000*ms).unlock(1, 60*ms).unlock(2, 70*ms)
	order := (&hist{}).lock(1, 0, 1*ms, 5, 100*ms).unlock(1, 2*ms).lock(2, 3*ms, 4*ms, 4, 100*ms).unlock(2, 5*ms)
	for _, tc := range []struct {
		name string
		h    *hist
		want string
	}{{"clean", clean, "Ok"}, {"overlap", overlap, "Illegal"}, {"order", order, "Illegal"}} {
		got, err := Porcupine(Check(tc.h.History).Grants, 1, 10*time.Second, "")
		if err != nil || got != tc.want {
			t.Errorf("%s: porcupine %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
