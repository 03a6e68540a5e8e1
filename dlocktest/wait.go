package dlocktest

import (
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil, and fails t with cond's last
// error if it still returns one after within. cond is called at once, then
// after pauses that double from a millisecond to 100ms: a condition that
// holds soon is seen soon, and one that takes seconds (a store reaping
// keys) is not asked about a thousand times a second.
//
// Call it from the test's goroutine; cond may call t.Fatal.
func WaitFor(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(pause)
	}
}
