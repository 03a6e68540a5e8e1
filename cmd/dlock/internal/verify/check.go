package verify

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Checks a Violation belongs to.
const (
	CheckPromise = "a"       // a grant inside another's validity
	CheckOrder   = "b"       // tokens out of grant order
	CheckFence   = "c"       // the resource accepted a stale token
	CheckOverlap = "overlap" // two workers believed they held at once (reported, not a failure)
)

// Grant is one acquisition as the checker reconstructs it from a worker's
// events.
type Grant struct {
	Worker int
	Token  uint64
	Invoke int64 // Lock was called
	Start  int64 // Lock returned
	End    int64 // end of validity: Unlock called, Deadline, or loss seen
	Belief int64 // until when the worker believed it held (Unlock or loss seen, or it died)
	Why    string
}

// Violation is one breach of a property.
type Violation struct {
	Check  string `json:"check"`
	T      int64  `json:"t"` // where it happened
	A, B   Grant  `json:"-"`
	Detail string `json:"detail"`
	// Outside is the label of an Outside fault the violation falls in: it
	// is reported, labelled, and not a failure.
	Outside string `json:"outside,omitempty"`
}

// Result is what Check found.
type Result struct {
	Grants      []Grant
	Violations  []Violation // (a), (b), (c) and raw overlaps, in time order
	Writes      int         // writes the resource saw (reads not counted)
	Accepted    int
	LostUpdates int // accepted writes that overwrote an increment they had not read
	// KillToGrant holds, for every kill of a worker that held the lock,
	// the time until the next grant to anyone.
	KillToGrant []time.Duration
}

// Failed reports whether a property inside the backend's assumptions was
// broken: an (a), (b) or (c) violation not labelled Outside.
func (r Result) Failed() bool {
	return r.Count(CheckPromise)+r.Count(CheckOrder)+r.Count(CheckFence) > 0
}

// Count returns the number of violations of check that count as failures
// (not labelled Outside).
func (r Result) Count(check string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Check == check && v.Outside == "" {
			n++
		}
	}
	return n
}

// Labelled returns the number of violations of check inside Outside faults.
func (r Result) Labelled(check string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Check == check && v.Outside != "" {
			n++
		}
	}
	return n
}

// LostUpdateRate is LostUpdates per accepted write.
func (r Result) LostUpdateRate() float64 {
	if r.Accepted == 0 {
		return 0
	}
	return float64(r.LostUpdates) / float64(r.Accepted)
}

// Check reconstructs the grants of h and checks them.
func Check(h History) Result {
	var r Result
	r.Grants = grants(h)
	r.Violations = append(r.Violations, promise(r.Grants)...)
	r.Violations = append(r.Violations, order(r.Grants)...)
	r.Violations = append(r.Violations, overlap(r.Grants)...)
	fv, accepted, lost := fence(h.Writes)
	r.Violations = append(r.Violations, fv...)
	for _, w := range h.Writes {
		if w.Op != "read" {
			r.Writes++
		}
	}
	r.Accepted, r.LostUpdates = accepted, lost
	r.KillToGrant = killToGrant(h.Faults, r.Grants)
	for i := range r.Violations {
		r.Violations[i].Outside = outside(h.Faults, r.Violations[i])
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].T < r.Violations[j].T })
	return r
}

// grants walks each worker's events in time order. A worker holds at most
// one grant at a time (the harness's workers lock one name, without
// reentry).
func grants(h History) []Grant {
	kills := map[int]int64{}
	for _, f := range h.Faults {
		if f.Kind == "kill" && f.Worker >= 0 {
			kills[f.Worker] = f.Start
		}
	}
	type state struct {
		invoke   int64
		open     bool
		g        Grant
		deadline int64
	}
	st := map[int]*state{}
	var out []Grant
	closeAt := func(s *state, end, belief int64, why string) {
		s.g.End = min(end, s.deadline)
		if s.deadline < end {
			why = "deadline"
		}
		s.g.Belief, s.g.Why = belief, why
		out = append(out, s.g)
		s.open = false
	}
	for _, e := range sortEvents(h.Events) {
		s := st[e.Worker]
		if s == nil {
			s = &state{}
			st[e.Worker] = s
		}
		switch {
		case e.Op == OpAcquire && e.Phase == Invoke:
			s.invoke = e.T
		case e.Op == OpAcquire && e.Phase == OK:
			if s.open { // a second grant without an end: close the first where the second starts
				closeAt(s, e.T, e.T, "next grant")
			}
			s.open = true
			s.deadline = e.Deadline
			s.g = Grant{Worker: e.Worker, Token: e.Token, Invoke: s.invoke, Start: e.T}
		case !s.open:
		case e.Op == OpRenew && e.Phase == OK:
			if e.T < s.deadline { // a renewal seen after the deadline extends nothing
				s.deadline = max(s.deadline, e.Deadline)
			}
		case e.Op == OpRelease && e.Phase == Invoke:
			closeAt(s, e.T, e.T, "unlock")
		case e.Op == OpLost:
			closeAt(s, e.T, e.T, "lost")
		}
	}
	for w, s := range st {
		if !s.open {
			continue
		}
		belief := int64(math.MaxInt64)
		why := "end of history"
		if k, ok := kills[w]; ok && k >= s.g.Start {
			belief, why = k, "killed"
		}
		closeAt(s, math.MaxInt64, belief, why)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// promise finds grants that started inside another grant's validity.
func promise(gs []Grant) []Violation {
	var vs []Violation
	var last *Grant // the grant with the latest End so far
	for i := range gs {
		g := &gs[i]
		if last != nil && last.End > g.Start {
			vs = append(vs, Violation{Check: CheckPromise, T: g.Start, A: *last, B: *g,
				Detail: fmt.Sprintf("worker %d was granted token %d while worker %d's grant (token %d) was valid for %v more",
					g.Worker, g.Token, last.Worker, last.Token, time.Duration(last.End-g.Start))})
		}
		if last == nil || g.End > last.End {
			last = g
		}
	}
	return vs
}

// overlap finds grants during which another worker believed it held the
// lock, once per such belief (a paused holder overlaps every grant made
// during its pause: one overlap).
func overlap(gs []Grant) []Violation {
	var vs []Violation
	var last, reported *Grant
	for i := range gs {
		g := &gs[i]
		if last != nil && last != reported && last.Belief > g.Start && last.Worker != g.Worker {
			reported = last
			vs = append(vs, Violation{Check: CheckOverlap, T: g.Start, A: *last, B: *g,
				Detail: fmt.Sprintf("worker %d was granted token %d while worker %d still believed it held token %d",
					g.Worker, g.Token, last.Worker, last.Token)})
		}
		if last == nil || g.Belief > last.Belief {
			last = g
		}
	}
	return vs
}

// order finds grants whose token is not above the token of a grant that
// returned before they were asked for.
func order(gs []Grant) []Violation {
	byStart := slices.Clone(gs) // gs is sorted by Start already
	byInvoke := slices.Clone(gs)
	sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
	var vs []Violation
	var best *Grant // the highest-token grant that returned before the current invoke
	j := 0
	for i := range byInvoke {
		g := &byInvoke[i]
		for j < len(byStart) && byStart[j].Start < g.Invoke {
			if best == nil || byStart[j].Token > best.Token {
				best = &byStart[j]
			}
			j++
		}
		if best != nil && g.Token <= best.Token {
			vs = append(vs, Violation{Check: CheckOrder, T: g.Start, A: *best, B: *g,
				Detail: fmt.Sprintf("worker %d got token %d after worker %d's token %d had been returned",
					g.Worker, g.Token, best.Worker, best.Token)})
		}
	}
	return vs
}

// fence checks the resource's serial log: no accepted token below an
// earlier accepted one (of a read or a write); an accepted write that did
// not read the value it replaced lost an update. accepted counts writes.
func fence(ws []Write) (vs []Violation, accepted, lost int) {
	var top uint64
	topWorker := -1
	var counter int64
	for _, w := range ws {
		if !w.Accepted {
			continue
		}
		if w.Token < top {
			what := "write"
			if w.Op == "read" {
				what = "read"
			}
			vs = append(vs, Violation{Check: CheckFence, T: w.T,
				A: Grant{Worker: topWorker, Token: top}, B: Grant{Worker: w.Worker, Token: w.Token},
				Detail: fmt.Sprintf("the resource accepted a %s with token %d from worker %d after token %d", what, w.Token, w.Worker, top)})
		}
		if w.Op == "read" {
			if w.Token > top {
				top, topWorker = w.Token, w.Worker
			}
			continue
		}
		accepted++
		if w.Token >= top {
			top, topWorker = w.Token, w.Worker
		}
		if w.Read != counter {
			lost++
		}
		counter = w.Value
	}
	return vs, accepted, lost
}

// killToGrant measures, for every kill of a worker inside its grant, the
// time to the next grant to any worker.
func killToGrant(fs []Fault, gs []Grant) []time.Duration {
	var out []time.Duration
	for _, f := range fs {
		if f.Kind != "kill" || f.Worker < 0 {
			continue
		}
		held := false
		for _, g := range gs {
			if g.Worker == f.Worker && g.Start <= f.Start && f.Start <= g.Belief {
				held = true
				break
			}
		}
		if !held {
			continue
		}
		i := sort.Search(len(gs), func(i int) bool { return gs[i].Start > f.Start })
		if i < len(gs) {
			out = append(out, time.Duration(gs[i].Start-f.Start))
		}
	}
	return out
}

// outside returns the label of the first Outside fault whose window
// contains the violation's time and, for a fault of one worker, that
// involves the worker.
func outside(fs []Fault, v Violation) string {
	for _, f := range fs {
		if f.Worker >= 0 && f.Worker != v.A.Worker && f.Worker != v.B.Worker {
			continue
		}
		if f.Outside && f.Start <= v.T && v.T <= f.End {
			if f.Label != "" {
				return f.Label
			}
			return f.Kind
		}
	}
	return ""
}

// Percentile returns the p-th percentile (0-100) of ds, 0 if empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
