// Package verify checks a recorded history of lock grants and fenced writes
// for the three properties dlock promises (see `dlock verify`):
//
//   - (a) promise: no grant starts inside another grant's validity, which
//     lasts from the moment Lock returned until the earliest of Unlock,
//     the lease's Deadline and the moment the worker saw it lost — for a
//     weighted kind, no grant starts while the weights of the valid grants
//     and its own exceed the limit (a semaphore: more than N permits; a
//     read-write lock: a reader beside a writer, or two writers);
//   - (b) token order: a grant that returned before another was asked for
//     has the smaller token (for an election, also: terms increase in
//     grant order);
//   - (c) fence: the resource never accepted a write whose token was lower
//     than one it had already accepted (nor a shared read whose token was
//     lower than an accepted writer's).
//
// It also measures what the properties do not forbid but a user wants to
// know: raw overlap (two workers that believed they held the lock at once),
// lost updates of a read-modify-write workload, and the time from a
// holder's kill to the next grant.
//
// # History
//
// Workers append [Event]s as JSON lines, with times read from
// CLOCK_MONOTONIC, which on Linux is one timeline for every process of the
// host. The resource keeps its own serial log of [Write]s, the ground truth
// for (c). The harness records the [Fault] windows it injected; a violation
// inside a window marked Outside (a fault beyond the backend's documented
// assumptions) is reported with the fault's label and not counted as a
// failure.
package verify

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Operations of an Event.
const (
	OpAcquire = "acquire" // Lock
	OpRenew   = "renew"   // the lease's deadline moved (seen by the worker)
	OpRelease = "release" // Unlock
	OpLost    = "lost"    // the worker saw the lease end (Done closed)
	OpWrite   = "write"   // a write to the fenced resource
)

// Phases of an Event.
const (
	Invoke  = "invoke"  // the call starts
	OK      = "ok"      // it returned success
	Fail    = "fail"    // it returned an error
	Unknown = "unknown" // the outcome is not known (the worker died)
)

// Event is one line of a worker's history.
type Event struct {
	T        int64  `json:"t"` // CLOCK_MONOTONIC, ns
	Worker   int    `json:"worker"`
	Op       string `json:"op"`
	Phase    string `json:"phase"`
	Token    uint64 `json:"token,omitempty"`
	Deadline int64  `json:"deadline,omitempty"` // acquire/renew ok: the lease's Deadline on the same clock
	Read     int64  `json:"read,omitempty"`     // write: the counter value the worker read
	Value    int64  `json:"value,omitempty"`    // write: the value it wrote
	Err      string `json:"err,omitempty"`
	// Kind, Weight and Limit describe an acquire ok of a kind other than
	// the mutex: the kind (KindSemaphore, KindRW, KindElection), the
	// grant's weight (a reader or permit 1, a writer the limit) and the
	// name's limit. A history without them is a mutex's.
	Kind   string `json:"kind,omitempty"`
	Weight int    `json:"weight,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// Kinds of a run, as --kind names them and events record them.
const (
	KindMutex     = "mutex"
	KindSemaphore = "semaphore"
	KindRW        = "rw"
	KindElection  = "election"
)

// Kinds lists the kinds a run can verify.
var Kinds = []string{KindMutex, KindSemaphore, KindRW, KindElection}

// Write is one entry of the resource's serial log, in the order the
// resource applied or refused the requests: a write, a read before it (Op
// "read", which carries the token too, so that the fence sees it), or a
// read-write lock's reader's read (Op "shared").
type Write struct {
	T        int64  `json:"t"`
	Op       string `json:"op,omitempty"` // "read", "shared", or "" for a write
	Worker   int    `json:"worker"`
	Token    uint64 `json:"token"`
	Read     int64  `json:"read"`  // the counter value the worker read before writing
	Value    int64  `json:"value"` // the value it asked to write
	Accepted bool   `json:"accepted"`
}

// Fault is a window in which the harness injected a fault.
type Fault struct {
	Kind    string `json:"kind"`   // e.g. "pause", "kill", "latency", "cut", "server-kill"
	Worker  int    `json:"worker"` // the worker it hit, -1 for a server or link fault
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Outside bool   `json:"outside,omitempty"` // beyond the backend's documented assumptions
	Label   string `json:"label,omitempty"`   // why it is outside, for the report
}

// History is everything a run recorded.
type History struct {
	Events []Event
	Writes []Write
	Faults []Fault
}

// ReadEvents appends the JSON lines of r to h.Events.
func (h *History) ReadEvents(r io.Reader) error { return readInto(r, &h.Events) }

// ReadWrites appends the JSON lines of r to h.Writes.
func (h *History) ReadWrites(r io.Reader) error { return readInto(r, &h.Writes) }

// readInto appends the JSON lines of r, each a T, to dst.
func readInto[T any](r io.Reader, dst *[]T) error {
	return readLines(r, func(dec *json.Decoder) error {
		var v T
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*dst = append(*dst, v)
		return nil
	})
}

// readLines decodes one JSON value per line. A last line cut short (a
// worker killed while writing it) is ignored; any other bad line is an
// error naming its number.
func readLines(r io.Reader, decode func(*json.Decoder) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var bad error
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		if bad != nil {
			return bad
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := decode(dec); err != nil {
			bad = fmt.Errorf("line %d: %w", n, err)
		}
	}
	return sc.Err()
}

// sortEvents orders events by time, keeping the recorded order of equal
// times (a worker writes its own events in order).
func sortEvents(es []Event) []Event {
	out := append([]Event(nil), es...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}
