package etcd

import (
	"encoding/json"
	"testing"

	"github.com/dlock-dev/dlock"
)

// A plain deletion of a key and a reentry of it exclude each other: a
// reentry while the deletion is in flight is refused (it retries, and
// finds the key gone), and a key once re-entered is released with the
// comparing transaction until a release deletes it.
func TestReentriesExclusion(t *testing.T) {
	var r reentries
	if !r.beginDelete("k") {
		t.Fatal("beginDelete of an untouched key refused")
	}
	if r.reenter("k") {
		t.Error("reenter during a plain deletion allowed")
	}
	if r.beginDelete("k") {
		t.Error("a second plain deletion in flight allowed")
	}
	r.endDelete("k")
	if !r.reenter("k") {
		t.Fatal("reenter after the deletion refused")
	}
	if r.beginDelete("k") {
		t.Error("plain deletion of a re-entered key allowed")
	}
	r.endDelete("k") // a no-op for a re-entered key
	if r.beginDelete("k") {
		t.Error("endDelete forgot a re-entry")
	}
	r.forget("k")
	if !r.beginDelete("k") {
		t.Error("beginDelete after forget refused")
	}
}

// encodeValue writes a mutex's value without reflection, byte for byte as
// json.Marshal does, whatever the owner.
func TestEncodeValueAsJSON(t *testing.T) {
	for _, owner := range []string{"host/123/0123456789abcdef", "job-42", `a"b`, `a\b`, "<&>", "tab\there", "é", "\x7f", ""} {
		for _, v := range []value{{Owner: owner, Holds: 1}, {Owner: owner, Holds: 12}, {Owner: owner, Holds: 1, Kind: dlock.KindSemaphore, Limit: 3, Weight: 1}} {
			want, _ := json.Marshal(v)
			if got := encodeValue(v); got != string(want) {
				t.Errorf("encodeValue(%+v) = %s, want %s", v, got, want)
			}
		}
	}
}
