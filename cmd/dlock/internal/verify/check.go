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
	// Weight is what the grant holds of the name's limit: 1 for a mutex,
	// a leader, a permit or a reader; the limit for a writer.
	Weight int
	// open: its worker recorded no end (and was not killed), so a history
	// still being written may not show the end yet.
	open bool
}

// weight is g's weight, 1 when the history did not record one.
func (g *Grant) weight() int { return max(g.Weight, 1) }

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
	Kind        string // what the history's name was used as (KindMutex when it does not say)
	Limit       int    // the name's limit (1 for a mutex and an election)
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
func Check(h History) Result { return check(h, nil) }

// CheckSoFar checks a history that is still being recorded, as the progress
// line of a run does, and returns only the violations that the final Check
// of the full history will count too. Each worker's file is read at a
// different moment and a paused worker cannot write, so a grant with no end
// recorded yet may have ended right after its worker's last event: it
// counts as valid only up to that event (to its deadline if the worker was
// killed, whose history is complete). A violation after now (the moment
// the faults were read, fault windows still open included with End
// math.MaxInt64) or inside an Outside fault of any worker may yet be
// labelled, and is left for the final check. provisional counts the (a)
// and (b) violations left out.
func CheckSoFar(h History, now int64) (r Result, provisional int) {
	known := map[int]int64{} // per worker: the time up to which its history is complete
	for _, e := range h.Events {
		known[e.Worker] = max(known[e.Worker], e.T)
	}
	for _, f := range h.Faults {
		if f.Kind == FaultKill && f.Worker >= 0 {
			known[f.Worker] = math.MaxInt64
		}
	}
	r = check(h, known)
	kept := r.Violations[:0]
	for _, v := range r.Violations {
		if v.T <= now && v.Outside == "" && !outsideAny(h.Faults, v.T) {
			kept = append(kept, v)
		}
	}
	r.Violations = kept
	// What the history as read shows beyond that may yet be confirmed.
	loose := check(h, nil)
	provisional = loose.Count(CheckPromise) + loose.Count(CheckOrder) - r.Count(CheckPromise) - r.Count(CheckOrder)
	return r, max(provisional, 0)
}

// outsideAny reports whether an Outside fault of any worker covers t: the
// final check labels a violation by the workers of the grants it names,
// and a history still being recorded may name others.
func outsideAny(fs []Fault, t int64) bool {
	for _, f := range fs {
		if f.Outside && f.Start <= t && t <= f.End {
			return true
		}
	}
	return false
}

// check is Check; with known (from CheckSoFar), a grant whose worker's
// history ends before its end is valid only up to that worker's last event.
func check(h History, known map[int]int64) Result {
	r := Result{Kind: KindMutex, Limit: 1}
	for _, e := range h.Events {
		if e.Op == OpAcquire && e.Phase == OK && e.Kind != "" {
			r.Kind, r.Limit = e.Kind, max(e.Limit, 1)
			break
		}
	}
	r.Grants = grants(h)
	if known != nil {
		for i := range r.Grants {
			if g := &r.Grants[i]; g.open {
				g.End = min(g.End, known[g.Worker])
			}
		}
	}
	r.Violations = append(r.Violations, promise(r.Grants, r.Kind, r.Limit)...)
	r.Violations = append(r.Violations, order(r.Grants, r.Kind == KindElection)...)
	r.Violations = append(r.Violations, overlap(r.Grants, r.Limit)...)
	fv, accepted, lost := fence(h.Writes)
	r.Violations = append(r.Violations, fv...)
	for _, w := range h.Writes {
		if w.Op == "" {
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

// whyEndOfHistory is the Why of a grant whose worker recorded no end.
const whyEndOfHistory = "end of history"

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
			s.g = Grant{Worker: e.Worker, Token: e.Token, Invoke: s.invoke, Start: e.T, Weight: e.Weight}
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
		why := whyEndOfHistory
		if k, ok := kills[w]; ok && k >= s.g.Start {
			belief, why = k, "killed"
		}
		closeAt(s, math.MaxInt64, belief, why)
		out[len(out)-1].open = why == whyEndOfHistory
	}
	// Ties broken by worker: a history read early and the same history
	// read in full order their grants alike (see CheckSoFar).
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].Worker < out[j].Worker
	})
	return out
}

// excess is a grant that started while the grants valid at its start (by
// the end that exceeds measures) and itself held more than the limit.
type excess struct {
	g, witness *Grant // witness: the valid grant that lasts longest
	held       int    // the weight the others held
	n          int    // how many others
}

// exceeds sweeps the grants in start order, keeping those still valid (by
// end), and returns every grant whose weight did not fit beside them. With
// others, only other workers' grants count (a belief the worker itself
// held is no overlap).
func exceeds(gs []Grant, limit int, end func(*Grant) int64, others bool) []excess {
	var out []excess
	var active []*Grant
	for i := range gs {
		g := &gs[i]
		active = slices.DeleteFunc(active, func(a *Grant) bool { return end(a) <= g.Start })
		x := excess{g: g}
		for _, a := range active {
			if others && a.Worker == g.Worker {
				continue
			}
			x.held += a.weight()
			x.n++
			if x.witness == nil || end(a) > end(x.witness) {
				x.witness = a
			}
		}
		if x.witness != nil && x.held+g.weight() > limit {
			out = append(out, x)
		}
		active = append(active, g)
	}
	return out
}

// promise finds grants that started inside another grant's validity, or
// for a weighted kind while the valid grants left no room for them.
func promise(gs []Grant, kind string, limit int) []Violation {
	var vs []Violation
	for _, x := range exceeds(gs, limit, func(g *Grant) int64 { return g.End }, false) {
		g, a := x.g, x.witness
		var d string
		switch kind {
		case KindSemaphore:
			d = fmt.Sprintf("worker %d was granted a permit (token %d) while %d permits of %d were valid (worker %d's token %d for %v more)",
				g.Worker, g.Token, x.held, limit, a.Worker, a.Token, time.Duration(a.End-g.Start))
		case KindRW:
			d = fmt.Sprintf("worker %d was granted a %s (token %d) while worker %d's %s (token %d) was valid for %v more",
				g.Worker, rwRole(g, limit), g.Token, a.Worker, rwRole(a, limit), a.Token, time.Duration(a.End-g.Start))
			if x.n > 1 {
				d += fmt.Sprintf(", with %d more grants", x.n-1)
			}
		case KindElection:
			d = fmt.Sprintf("worker %d was elected with term %d while worker %d's term %d was valid for %v more",
				g.Worker, g.Token, a.Worker, a.Token, time.Duration(a.End-g.Start))
		default:
			d = fmt.Sprintf("worker %d was granted token %d while worker %d's grant (token %d) was valid for %v more",
				g.Worker, g.Token, a.Worker, a.Token, time.Duration(a.End-g.Start))
		}
		vs = append(vs, Violation{Check: CheckPromise, T: g.Start, A: *a, B: *g, Detail: d})
	}
	return vs
}

// rwRole names a read-write lock's grant by its weight.
func rwRole(g *Grant, limit int) string {
	if g.weight() >= limit {
		return "write lock"
	}
	return "read lock"
}

// overlap finds grants during which other workers believed they held more
// than the limit left room for, once per such belief (a paused holder
// overlaps every grant made during its pause: one overlap).
func overlap(gs []Grant, limit int) []Violation {
	var vs []Violation
	reported := map[*Grant]bool{}
	for _, x := range exceeds(gs, limit, func(g *Grant) int64 { return g.Belief }, true) {
		g, a := x.g, x.witness
		if reported[a] {
			continue
		}
		reported[a] = true
		vs = append(vs, Violation{Check: CheckOverlap, T: g.Start, A: *a, B: *g,
			Detail: fmt.Sprintf("worker %d was granted token %d while worker %d still believed it held token %d",
				g.Worker, g.Token, a.Worker, a.Token)})
	}
	return vs
}

// order finds grants whose token is not above the token of a grant that
// returned before they were asked for. With terms (an election), a token
// must also be above every grant's that returned before it did: leaders
// follow each other, so terms increase in grant order.
func order(gs []Grant, terms bool) []Violation {
	byStart := slices.Clone(gs) // gs is sorted by Start already
	byRef := slices.Clone(gs)
	ref := func(g *Grant) int64 { return g.Invoke }
	if terms {
		ref = func(g *Grant) int64 { return g.Start }
	}
	sort.SliceStable(byRef, func(i, j int) bool { return ref(&byRef[i]) < ref(&byRef[j]) })
	var vs []Violation
	var best *Grant // the highest-token grant that returned before the current reference time
	j := 0
	for i := range byRef {
		g := &byRef[i]
		for j < len(byStart) && byStart[j].Start < ref(g) {
			if best == nil || byStart[j].Token > best.Token {
				best = &byStart[j]
			}
			j++
		}
		if best == nil || g.Token > best.Token {
			continue
		}
		d := fmt.Sprintf("worker %d got token %d after worker %d's token %d had been returned",
			g.Worker, g.Token, best.Worker, best.Token)
		if terms && best.Start >= g.Invoke {
			d = fmt.Sprintf("worker %d was elected with term %d after worker %d had been elected with term %d",
				g.Worker, g.Token, best.Worker, best.Token)
		}
		vs = append(vs, Violation{Check: CheckOrder, T: g.Start, A: *best, B: *g, Detail: d})
	}
	return vs
}

// fence checks the resource's serial log: no accepted token of a write (or
// of the read before it) below an earlier accepted one of any kind, and no
// accepted shared read (a read-write lock's reader) below an earlier
// accepted write's or exclusive read's (readers share, so they do not fence
// each other). An accepted write that did not read the value it replaced
// lost an update. accepted counts writes.
func fence(ws []Write) (vs []Violation, accepted, lost int) {
	var top, topX uint64 // the highest accepted token: of anything; of a writer
	topWorker, topXWorker := -1, -1
	var counter int64
	for _, w := range ws {
		if !w.Accepted {
			continue
		}
		shared := w.Op == "shared"
		bar, barWorker := top, topWorker
		if shared {
			bar, barWorker = topX, topXWorker
		}
		if w.Token < bar {
			what := "write"
			switch w.Op {
			case "read":
				what = "read"
			case "shared":
				what = "shared read"
			}
			vs = append(vs, Violation{Check: CheckFence, T: w.T,
				A: Grant{Worker: barWorker, Token: bar}, B: Grant{Worker: w.Worker, Token: w.Token},
				Detail: fmt.Sprintf("the resource accepted a %s with token %d from worker %d after token %d", what, w.Token, w.Worker, bar)})
		}
		if w.Token > top {
			top, topWorker = w.Token, w.Worker
		}
		if !shared && w.Token > topX {
			topX, topXWorker = w.Token, w.Worker
		}
		if w.Op != "" {
			continue
		}
		accepted++
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
