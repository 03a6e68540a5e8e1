package verify

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// grant appends a grant of kind with weight out of limit, as a worker of
// that kind records it.
func (h *hist) grant(w int, kind string, weight, limit int, invoke, ok int64, token uint64, deadline int64) *hist {
	h.Events = append(h.Events,
		Event{T: invoke, Worker: w, Op: OpAcquire, Phase: Invoke, Kind: kind, Weight: weight, Limit: limit},
		Event{T: ok, Worker: w, Op: OpAcquire, Phase: OK, Token: token, Deadline: deadline, Kind: kind, Weight: weight, Limit: limit})
	return h
}

func (h *hist) permit(w int, invoke, ok int64, token uint64, deadline int64) *hist {
	return h.grant(w, KindSemaphore, 1, 2, invoke, ok, token, deadline)
}

func (h *hist) reader(w int, invoke, ok int64, token uint64, deadline int64) *hist {
	return h.grant(w, KindRW, 1, dlock.RWLimit, invoke, ok, token, deadline)
}

func (h *hist) writer(w int, invoke, ok int64, token uint64, deadline int64) *hist {
	return h.grant(w, KindRW, dlock.RWLimit, dlock.RWLimit, invoke, ok, token, deadline)
}

func (h *hist) leader(w int, invoke, ok int64, token uint64, deadline int64) *hist {
	return h.grant(w, KindElection, 1, 1, invoke, ok, token, deadline)
}

func (h *hist) shared(w int, t int64, token uint64, accepted bool) *hist {
	h.Writes = append(h.Writes, Write{T: t, Op: "shared", Worker: w, Token: token, Accepted: accepted})
	return h
}

// checkKind checks h and fails unless it finds want (a) and (b)
// violations, and porcupine agrees on whether there are any.
func checkKind(t *testing.T, h *hist, wantA, wantB int) Result {
	t.Helper()
	r := Check(h.History)
	if r.Count(CheckPromise) != wantA || r.Count(CheckOrder) != wantB {
		t.Fatalf("%s of %d: (a) %d (b) %d, want %d %d: %+v", r.Kind, r.Limit,
			r.Count(CheckPromise), r.Count(CheckOrder), wantA, wantB, r.Violations)
	}
	want := "Ok"
	if wantA+wantB > 0 {
		want = "Illegal"
	}
	if got, err := Porcupine(r.Grants, r.Limit, 10*time.Second, ""); err != nil || got != want {
		t.Errorf("porcupine %q, %v; want %q", got, err, want)
	}
	return r
}

// A semaphore of 2: two permits at once are fine, a third while both are
// valid is not — also when one of them is only valid because its worker
// never recorded an end before its deadline.
func TestSemaphoreCheck(t *testing.T) {
	t.Run("within", func(t *testing.T) {
		h := (&hist{}).
			permit(1, 0, 1*ms, 1, 1000*ms).permit(2, 0, 2*ms, 2, 1000*ms).
			permit(3, 0, 51*ms, 3, 1000*ms). // after worker 1 released
			unlock(1, 50*ms).unlock(2, 60*ms).unlock(3, 70*ms).
			permit(1, 100*ms, 150*ms, 4, 200*ms). // lost at its deadline, no end recorded
			permit(2, 101*ms, 201*ms, 5, 1000*ms).permit(3, 102*ms, 202*ms, 6, 1000*ms)
		r := checkKind(t, h, 0, 0)
		if r.Kind != KindSemaphore || r.Limit != 2 {
			t.Fatalf("kind %q limit %d, want semaphore of 2", r.Kind, r.Limit)
		}
	})
	t.Run("over the limit", func(t *testing.T) {
		h := (&hist{}).
			permit(1, 0, 1*ms, 1, 1000*ms).permit(2, 0, 2*ms, 2, 1000*ms).
			permit(3, 0, 3*ms, 3, 1000*ms). // both others still valid
			unlock(1, 50*ms).unlock(2, 60*ms).unlock(3, 70*ms)
		r := checkKind(t, h, 1, 0)
		if d := r.Violations[0].Detail; !strings.Contains(d, "worker 3 was granted a permit (token 3) while 2 permits of 2 were valid") {
			t.Errorf("detail %q", d)
		}
	})
	t.Run("until the deadline", func(t *testing.T) {
		h := (&hist{}).
			permit(1, 0, 1*ms, 1, 100*ms).permit(2, 0, 2*ms, 2, 1000*ms).
			permit(3, 0, 99*ms, 3, 1000*ms) // worker 1 recorded no end: valid to its deadline
		checkKind(t, h, 1, 0)
	})
}

// A read-write lock: readers share; a reader beside a writer, or a second
// writer, is a violation.
func TestRWCheck(t *testing.T) {
	t.Run("within", func(t *testing.T) {
		h := (&hist{}).
			reader(1, 0, 1*ms, 1, 1000*ms).reader(2, 0, 2*ms, 2, 1000*ms).reader(3, 0, 3*ms, 3, 1000*ms).
			unlock(1, 10*ms).unlock(2, 11*ms).unlock(3, 12*ms).
			writer(4, 5*ms, 13*ms, 4, 1000*ms).unlock(4, 20*ms).
			reader(1, 15*ms, 21*ms, 5, 1000*ms).reader(2, 16*ms, 22*ms, 6, 1000*ms)
		checkKind(t, h, 0, 0)
	})
	t.Run("reader beside writer", func(t *testing.T) {
		h := (&hist{}).
			writer(1, 0, 1*ms, 1, 1000*ms).
			reader(2, 0, 5*ms, 2, 1000*ms). // the writer is valid
			unlock(1, 10*ms).unlock(2, 11*ms)
		r := checkKind(t, h, 1, 0)
		if d := r.Violations[0].Detail; !strings.Contains(d, "worker 2 was granted a read lock (token 2) while worker 1's write lock (token 1) was valid") {
			t.Errorf("detail %q", d)
		}
	})
	t.Run("writer beside readers", func(t *testing.T) {
		h := (&hist{}).
			reader(1, 0, 1*ms, 1, 1000*ms).reader(2, 0, 2*ms, 2, 1000*ms).
			writer(3, 0, 5*ms, 3, 1000*ms).
			unlock(1, 10*ms).unlock(2, 11*ms).unlock(3, 12*ms)
		checkKind(t, h, 1, 0)
	})
	t.Run("two writers", func(t *testing.T) {
		h := (&hist{}).
			writer(1, 0, 1*ms, 1, 1000*ms).writer(2, 0, 5*ms, 2, 1000*ms).
			unlock(1, 10*ms).unlock(2, 11*ms)
		checkKind(t, h, 1, 0)
	})
}

// An election: one leader at a time, and terms increase in the order the
// leaders were elected — also between campaigns that overlapped, which
// the mutex's token order allows in either order.
func TestElectionCheck(t *testing.T) {
	t.Run("within", func(t *testing.T) {
		h := (&hist{}).
			leader(1, 0, 1*ms, 1, 1000*ms).unlock(1, 10*ms).
			leader(2, 0, 11*ms, 2, 1000*ms).lost(2, 20*ms).
			leader(3, 5*ms, 21*ms, 3, 1000*ms).unlock(3, 30*ms)
		checkKind(t, h, 0, 0)
	})
	t.Run("two leaders", func(t *testing.T) {
		h := (&hist{}).
			leader(1, 0, 1*ms, 1, 1000*ms).leader(2, 0, 5*ms, 2, 1000*ms).
			unlock(1, 10*ms).unlock(2, 11*ms)
		checkKind(t, h, 1, 0)
	})
	t.Run("term went back", func(t *testing.T) {
		// Worker 2 campaigned before worker 1 was elected (the mutex's
		// order check allows it) and was elected after worker 1 resigned,
		// with a lower term.
		h := (&hist{}).
			leader(1, 0, 1*ms, 5, 1000*ms).unlock(1, 10*ms).
			leader(2, 0, 11*ms, 4, 1000*ms).unlock(2, 20*ms)
		r := checkKind(t, h, 0, 1)
		if d := r.Violations[0].Detail; !strings.Contains(d, "worker 2 was elected with term 4 after worker 1 had been elected with term 5") {
			t.Errorf("detail %q", d)
		}
		// The same history as a mutex's passes (b): the term rule is the
		// election's. (Porcupine's lock model is the stricter one.)
		for i := range h.Events {
			h.Events[i].Kind, h.Events[i].Weight, h.Events[i].Limit = "", 0, 0
		}
		if r := Check(h.History); r.Failed() {
			t.Fatalf("as a mutex: %+v", r.Violations)
		}
	})
}

// A read-write lock's shared reads fence against writers, not each other.
func TestSharedReadFence(t *testing.T) {
	ok := (&hist{}).write(1, 1*ms, 3, 0, 1, true).
		shared(2, 2*ms, 5, true).shared(3, 3*ms, 4, true). // readers 4 and 5 together
		write(4, 4*ms, 6, 1, 2, true)
	if r := Check(ok.History); r.Count(CheckFence) != 0 || r.Writes != 2 {
		t.Fatalf("readers sharing: %+v, writes %d", r.Violations, r.Writes)
	}
	stale := (&hist{}).write(1, 1*ms, 6, 0, 1, true).shared(2, 2*ms, 5, true)
	if r := Check(stale.History); r.Count(CheckFence) != 1 {
		t.Fatalf("a reader below a writer: %+v, want one (c)", r.Violations)
	}
	behind := (&hist{}).shared(2, 1*ms, 7, true).write(1, 2*ms, 6, 0, 1, true)
	if r := Check(behind.History); r.Count(CheckFence) != 1 {
		t.Fatalf("a writer below a reader: %+v, want one (c)", r.Violations)
	}
}

// The resource answers SHARED by the writers' tokens only, and HOLD without
// a fence or a log line; both reach the fault hook.
func TestResourceSharedAndHold(t *testing.T) {
	var log strings.Builder
	hooked := make(chan int, 10)
	res, err := NewResource(true, &log, func(worker, pid int) { hooked <- worker })
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	c, err := net.Dial("tcp", res.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	call := func(req string) string {
		t.Helper()
		io.WriteString(c, req+"\n")
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(line)
	}
	for _, tc := range []struct{ req, want string }{
		{"HELLO 1 1", "OK"},
		{"SHARED 5", "0"},
		{"SHARED 4", "0"}, // another reader, lower token: readers share
		{"HOLD", "OK"},
		{"READ 6", "0"},
		{"WRITE 6 0 1", "OK"},
		{"SHARED 5", "STALE"}, // a reader behind writer 6
		{"READ 5", "STALE"},
	} {
		if got := call(tc.req); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.req, got, tc.want)
		}
	}
	if n := len(hooked); n != 4 {
		t.Errorf("fault hook called %d times, want 4 (two SHARED, HOLD, READ)", n)
	}
	if got := strings.Count(log.String(), "\n"); got != 6 {
		t.Errorf("log has %d lines, want 6 (HOLD is not logged):\n%s", got, log.String())
	}
}

// Config refuses kinds and limits that make no run.
func TestConfigKind(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		limit int
		want  string
	}{
		{"queue", 0, "unknown kind"},
		{KindSemaphore, 0, "needs --limit"},
		{KindSemaphore, 4, "never run out"},
		{KindRW, 2, "--limit is for --kind semaphore"},
	} {
		cfg := Config{Workers: 4, Duration: time.Second, TTL: time.Second, Out: t.TempDir(), Kind: tc.kind, Limit: tc.limit}
		if err := cfg.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--kind %s --limit %d: %v, want %q", tc.kind, tc.limit, err, tc.want)
		}
	}
	cfg := Config{Workers: 4, Duration: time.Second, TTL: time.Second, Out: t.TempDir(), Kind: KindSemaphore, Limit: 2}
	if err := cfg.check(); err != nil {
		t.Errorf("a semaphore of 2 with 4 workers: %v", err)
	}
}
