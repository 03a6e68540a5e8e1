package verify

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The progress line's case: worker 1's file was read before it recorded
// its release, and worker 2's after it was granted in the time between.
// Checked as if complete, worker 1's grant looks valid to its deadline and
// worker 2's grant a violation that the final check does not find.
func TestCheckSoFarOpenGrant(t *testing.T) {
	read := (&hist{}).lock(1, 0, 1*ms, 1, 1000*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms)
	full := (&hist{}).lock(1, 0, 1*ms, 1, 1000*ms).unlock(1, 40*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms).unlock(2, 60*ms)
	final := Check(full.History)
	r, provisional := CheckSoFar(read.History, math.MaxInt64)
	if got, want := r.Count(CheckPromise), final.Count(CheckPromise); got > want || got != 0 || provisional != 1 {
		t.Fatalf("so far (a) %d, %d provisional; final (a) %d: want 0, 1 and no more than final", got, provisional, want)
	}

	// Worker 1 recorded a renewal after worker 2's grant: its grant was
	// valid then, and the violation is certain.
	read.renew(1, 55*ms, 1100*ms)
	full = (&hist{}).lock(1, 0, 1*ms, 1, 1000*ms).renew(1, 55*ms, 1100*ms).unlock(1, 70*ms).
		lock(2, 2*ms, 50*ms, 2, 1000*ms).unlock(2, 80*ms)
	r, provisional = CheckSoFar(read.History, math.MaxInt64)
	if r.Count(CheckPromise) != 1 || provisional != 0 || Check(full.History).Count(CheckPromise) != 1 {
		t.Fatalf("so far (a) %d, %d provisional, final (a) %d: want 1, 0, 1", r.Count(CheckPromise), provisional, Check(full.History).Count(CheckPromise))
	}

	// A killed worker's history is complete: its grant is valid to its
	// deadline, as the final check counts it.
	killed := (&hist{}).lock(1, 0, 1*ms, 1, 100*ms).fault(Fault{Kind: FaultKill, Worker: 1, Start: 5 * ms, End: 5 * ms}).
		lock(2, 2*ms, 50*ms, 2, 1000*ms)
	r, _ = CheckSoFar(killed.History, math.MaxInt64)
	if r.Count(CheckPromise) != 1 || Check(killed.History).Count(CheckPromise) != 1 {
		t.Fatalf("killed holder: so far %+v", r.Violations)
	}

	// A violation after the moment the faults were read, or inside an
	// Outside fault of any worker (the final check may name another worker
	// beside worker 2, one the fault hit), is left for the final check.
	r, provisional = CheckSoFar(read.History, 10*ms)
	if r.Count(CheckPromise) != 0 || provisional != 1 {
		t.Fatalf("after now: so far (a) %d, %d provisional", r.Count(CheckPromise), provisional)
	}
	read.fault(Fault{Kind: FaultSkew, Worker: 3, Start: 0, End: math.MaxInt64, Outside: true})
	r, provisional = CheckSoFar(read.History, math.MaxInt64)
	if r.Count(CheckPromise) != 0 || provisional != 1 {
		t.Fatalf("inside an Outside fault: so far (a) %d, %d provisional", r.Count(CheckPromise), provisional)
	}
}

// On random histories of every kind, read at random moments as a run's
// progress line reads them (each worker's file cut at its own point, the
// faults recorded by then), every violation the progress line counts is
// one the final check counts — so its count never exceeds the final one.
func TestCheckSoFarNeverExceedsFinal(t *testing.T) {
	type key struct {
		check  string
		worker int
		start  int64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	extra := 0
	for i := 0; i < 400; i++ {
		kind := Kinds[i%len(Kinds)]
		full, cuts := randomHistory(rng, kind)
		final := map[key]bool{}
		for _, v := range Check(full).Violations {
			if v.Outside == "" {
				final[key{v.Check, v.B.Worker, v.B.Start}] = true
			}
		}
		for c := 0; c < 10; c++ {
			now := rng.Int64N(1200 * ms)
			r, _ := CheckSoFar(cutHistory(rng, full, cuts, now), now)
			for _, v := range r.Violations {
				if (v.Check == CheckPromise || v.Check == CheckOrder) && !final[key{v.Check, v.B.Worker, v.B.Start}] {
					if extra++; extra < 4 {
						t.Errorf("%s history %d read at %d ms: (%s) %s: not in the final check", kind, i, now/ms, v.Check, v.Detail)
					}
				}
			}
		}
	}
	if extra > 0 {
		t.Fatalf("the progress line counted %d violations the final check does not", extra)
	}
}

// randomHistory makes a history of 4 workers of kind, with overlaps,
// out-of-order tokens, losses, kills and Outside faults. cuts[w] is the
// index of worker w's events in Events, in order.
func randomHistory(rng *rand.Rand, kind string) (History, map[int][]int) {
	var h History
	cuts := map[int][]int{}
	limit := 1
	switch kind {
	case KindSemaphore:
		limit = 2
	case KindRW:
		limit = 100
	}
	for w := 0; w < 4; w++ {
		t := rng.Int64N(20 * ms)
		add := func(e Event) {
			e.Worker = w
			if kind != KindMutex {
				e.Kind, e.Limit = kind, limit
			}
			cuts[w] = append(cuts[w], len(h.Events))
			h.Events = append(h.Events, e)
		}
		for t < 1000*ms {
			weight := 1
			if kind == KindRW && rng.IntN(3) == 0 {
				weight = limit
			}
			add(Event{T: t, Op: OpAcquire, Phase: Invoke, Weight: weight})
			t += rng.Int64N(40 * ms)
			token := uint64(t/ms) + uint64(rng.IntN(3)) // mostly in grant order
			deadline := t + 20*ms + rng.Int64N(150*ms)
			add(Event{T: t, Op: OpAcquire, Phase: OK, Token: token, Deadline: deadline, Weight: weight})
			if rng.IntN(3) == 0 {
				t += rng.Int64N(deadline - t)
				deadline = t + 20*ms + rng.Int64N(150*ms)
				add(Event{T: t, Op: OpRenew, Phase: OK, Token: token, Deadline: deadline})
			}
			t += rng.Int64N(200 * ms)
			switch rng.IntN(10) {
			case 0: // killed holding: no more events
				h.Faults = append(h.Faults, Fault{Kind: FaultKill, Worker: w, Start: t, End: t})
				t = math.MaxInt64
			case 1, 2:
				add(Event{T: t, Op: OpLost, Phase: OK, Token: token})
			default:
				add(Event{T: t, Op: OpRelease, Phase: Invoke, Token: token})
				add(Event{T: t + ms, Op: OpRelease, Phase: OK, Token: token})
			}
			if t != math.MaxInt64 {
				t += rng.Int64N(20 * ms)
			}
		}
	}
	for n := rng.IntN(3); n > 0; n-- {
		start := rng.Int64N(1000 * ms)
		h.Faults = append(h.Faults, Fault{Kind: "outside", Worker: rng.IntN(5) - 1, Start: start,
			End: start + rng.Int64N(300*ms), Outside: true, Label: "outside"})
	}
	return h, cuts
}

// cutHistory is full as a progress line reading it after now might see it:
// the faults recorded by now (an open one with no end yet; a kill's
// worker's history complete), each other worker's events up to a random
// point.
func cutHistory(rng *rand.Rand, full History, cuts map[int][]int, now int64) History {
	var h History
	complete := map[int]bool{}
	for _, f := range full.Faults {
		if f.Start > now {
			continue
		}
		if f.End > now {
			f.End = math.MaxInt64
		}
		if f.Kind == FaultKill {
			complete[f.Worker] = true
		}
		h.Faults = append(h.Faults, f)
	}
	for w, idx := range cuts {
		n := len(idx)
		if !complete[w] {
			n = rng.IntN(len(idx) + 1)
		}
		for _, i := range idx[:n] {
			h.Events = append(h.Events, full.Events[i])
		}
	}
	return h
}
