package sqlident

import "testing"

func TestPlain(t *testing.T) {
	for name, want := range map[string]bool{
		"dlock_locks": true, "_x": true, "T9": true, "a": true,
		"": false, "9a": false, "a-b": false, "a b": false, "a;DROP": false,
		"é": false, "a\x00": false, `a"`: false, "a.b": false,
	} {
		if got := Plain(name); got != want {
			t.Errorf("Plain(%q) = %v, want %v", name, got, want)
		}
	}
}
