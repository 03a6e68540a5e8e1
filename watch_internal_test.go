package dlock

import (
	"errors"
	"testing"
)

// TestSendLatestKeepsTheError: a slow reader of a watch gets the latest
// state and, before it, the last error it has not read — not the states
// in between, and not an outage merged away by the recovery.
func TestSendLatestKeepsTheError(t *testing.T) {
	out := make(chan Holders, 2)
	w := watchLoop{out: out}
	w.send(Holders{Name: "a"})
	w.send(Holders{Err: errors.New("down")})
	w.send(Holders{Name: "b"})
	w.send(Holders{Name: "c"})
	first, second := <-out, <-out
	if first.Err == nil || second.Name != "c" || len(out) != 0 {
		t.Errorf("read %+v then %+v (%d more), want the error then c", first, second, len(out))
	}
	w.send(Holders{Name: "d"})
	w.send(Holders{Name: "e"})
	if got := <-out; got.Name != "e" || len(out) != 0 {
		t.Errorf("read %+v (%d more), want only the latest, e", got, len(out))
	}
}
