package zookeeper

import (
	"encoding/json"
	"testing"
)

// TestDataFastPath checks that encodeData writes the bytes of json.Marshal
// and that parseData and decodeData read what encoding/json reads, with
// and without the direct path for plain owners.
func TestDataFastPath(t *testing.T) {
	owners := []string{"a", "host/123/0f1e2d3c4b5a69788796a5b4c3d2e1f0", "job-42", "with space", `q"uote`, `back\slash`,
		"<html>&", "tab\there", "naïve", "\u2028", "~!@#$%^*()_+{}|:?[];',./`"}
	for _, o := range owners {
		for _, n := range []int{1, 9, 10, 123456789, 1234567890} {
			want, _ := json.Marshal(nodeData{Owner: o, Count: n})
			if got := encodeData(o, n); string(got) != string(want) {
				t.Errorf("encodeData(%q, %d) = %s, want %s", o, n, got, want)
			}
			d, bad := parseData(want, nil)
			if bad != "" || d.Owner != o || d.Count != n {
				t.Errorf("parseData(%s) = %+v, %q", want, d, bad)
			}
			if d := decodeData(want); d.Owner != o || d.Count != n {
				t.Errorf("decodeData(%s) = %+v", want, d)
			}
		}
	}
	for _, in := range []string{`{"owner":"a","count":0}`, `{"owner":"a","count":01}`, `{"owner":"","count":1}`,
		`{"owner":"a","count":1} `, `{"owner":"a","count":-1}`, `{"owner":"a","count":1,"x":2}`, `{"owner":"a"}`,
		`{"owner":"a","count":1`, `garbage`, ``, `{"owner":"a\"b","count":2}`} {
		var ref nodeData
		refErr := json.Unmarshal([]byte(in), &ref)
		d, bad := parseData([]byte(in), nil)
		refBad := refErr != nil || ref.Owner == "" || ref.Count < 1
		if (bad != "") != refBad || (!refBad && d != ref) {
			t.Errorf("parseData(%s) = %+v, %q; encoding/json reads %+v, %v", in, d, bad, ref, refErr)
		}
	}
}
